//! The process's global allocator: mimalloc, asked for an aligned block only when a type needs
//! more alignment than every mimalloc block has anyway.
//!
//! The `mimalloc` crate's allocator passes every request to `mi_malloc_aligned`. mimalloc serves
//! that from its fast path only for blocks of up to 1 KiB; a larger block with ordinary
//! alignment takes its over-allocating aligned path, which costs about 250 instructions more and
//! returns a larger block. The proxy path makes such a block for every response (the entry
//! table of the response's header map), and request and response bodies are larger still. Rust's
//! `System` allocator makes the same choice between `malloc` and an aligned allocation.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment of every block `mi_malloc` returns: blocks are whole words, on pages that start
/// aligned.
const BLOCK_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator. Each call runs when Rust allocates; it returns mimalloc's
/// block, or null when memory is exhausted.
pub struct MiMalloc;

// SAFETY: every block comes from mimalloc with at least the layout's alignment: `mi_malloc`'s
// blocks are word-aligned, and larger alignments go to mimalloc's aligned entry points.
// `mi_free` takes blocks from either.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain C calls; mimalloc accepts any size and returns null on failure.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi::mi_malloc(layout.size()) as *mut u8
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi::mi_zalloc(layout.size()) as *mut u8
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from mimalloc.
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the new block keeps its alignment.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment up to 64 KiB and 4 KiB: blocks are aligned, writable, and keep
    /// their bytes through `realloc`.
    #[test]
    fn blocks_have_their_alignment_and_keep_their_bytes() {
        let a = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1usize, 7, 8, 24, 100, 1023, 1024, 1025, 1664, 4097, 65536] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: each block is used within its size and returned with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    std::ptr::write_bytes(p, 0xA5, size);
                    let bigger = size * 3;
                    let q = a.realloc(p, layout, bigger);
                    assert_eq!(q as usize % align, 0, "realloc, size {size} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xA5));
                    a.dealloc(q, Layout::from_size_align(bigger, align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}

//! A quick pass of `jsonProtection` for the everyday body: a complete JSON document in one
//! chunk, with ASCII strings without escapes, numbers, literals, objects of at most 32 keys
//! and arrays, within the limits. It answers only "acceptable" (with the number of tokens, for
//! the scanner's bookkeeping) or "not sure"; for anything else — an escape, a non-ASCII byte, a
//! limit reached, an error, a document that may go on in the next chunk — the byte-by-byte
//! [`super::Scanner`] decides and words the violation. About ten times cheaper
//! than the scanner.

use super::limits::Limits;

/// Keys of one object the quick pass compares (more: not sure).
const MAX_KEYS: usize = 32;

/// An open container.
struct Open {
    object: bool,
    /// Keys (objects) or elements (arrays) so far.
    count: u64,
    /// Where this object's keys start in the key list.
    keys_start: usize,
}

/// The bytes a string holds as they are: printable ASCII but `"` and `\`.
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0x20;
    while b < 0x7F {
        t[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    t
};

/// True when `b` is a byte a string holds as it is.
fn plain(b: u8) -> bool {
    PLAIN[b as usize]
}

/// The end of the run of plain string bytes starting at `i`.
fn plain_run(body: &[u8], i: usize) -> usize {
    body.get(i..)
        .and_then(|rest| rest.iter().position(|&b| !plain(b)))
        .map_or(body.len(), |p| i + p)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// A short hash of a key, compared before the key's bytes.
fn key_hash(k: &[u8]) -> u32 {
    k.iter().fold(0x811C_9DC5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The number of tokens of `body` when it is a complete document the scanner would accept
/// unchanged and the quick pass is sure of it; `None` otherwise.
pub(crate) fn acceptable(body: &[u8], limits: &Limits) -> Option<u64> {
    let n = body.len();
    if n as u64 > limits.max_size {
        return None;
    }
    let mut stack: smallvec::SmallVec<[Open; 8]> = smallvec::SmallVec::new();
    // (start, end, hash) of the keys of the open objects.
    let mut keys: smallvec::SmallVec<[(usize, usize, u32); 32]> = smallvec::SmallVec::new();
    let mut tokens: u64 = 0;
    let mut i = 0;
    // Whether a value is expected (else a `,` or the end of the container).
    let mut want_value = true;
    loop {
        while i < n && is_space(body[i]) {
            i += 1;
        }
        if want_value {
            let b = *body.get(i)?;
            // A value starts: count it in its array.
            if let Some(top) = stack.last_mut() {
                if !top.object {
                    top.count += 1;
                    if top.count > limits.max_array_size {
                        return None;
                    }
                }
            }
            tokens += 1;
            if tokens > limits.max_tokens {
                return None;
            }
            match b {
                b'{' | b'[' => {
                    if stack.len() as u64 >= limits.max_depth {
                        return None;
                    }
                    let object = b == b'{';
                    stack.push(Open {
                        object,
                        count: 0,
                        keys_start: keys.len(),
                    });
                    i += 1;
                    while i < n && is_space(body[i]) {
                        i += 1;
                    }
                    match body.get(i) {
                        Some(b'}') if object => {}
                        Some(b']') if !object => {}
                        Some(b'"') if object => {
                            i = key(body, i, limits, &mut stack, &mut keys)?;
                            continue;
                        }
                        Some(_) if !object => continue, // the first element
                        _ => return None,
                    }
                    // An empty container: close it below.
                    want_value = false;
                    continue;
                }
                b'"' => {
                    let start = i + 1;
                    let e = plain_run(body, start);
                    if body.get(e) != Some(&b'"') || (e - start) as u64 > limits.max_string_length {
                        return None;
                    }
                    i = e + 1;
                }
                b'-' | b'0'..=b'9' => {
                    i = number(body, i)?;
                    // A number that ends the body might go on in the next chunk.
                    if i >= n {
                        return None;
                    }
                }
                b't' | b'f' | b'n' => {
                    let word: &[u8] = match b {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    };
                    if body.get(i..i + word.len()) != Some(word) {
                        return None;
                    }
                    i += word.len();
                }
                _ => return None,
            }
            want_value = false;
            continue;
        }
        // After a value: `,`, the end of its container, or the end of the document.
        let Some(top) = stack.last() else {
            // The document is complete; only whitespace may follow.
            return (i == n).then_some(tokens);
        };
        match body.get(i) {
            Some(b',') => {
                i += 1;
                if top.object {
                    while i < n && is_space(body[i]) {
                        i += 1;
                    }
                    if body.get(i) != Some(&b'"') {
                        return None;
                    }
                    i = key(body, i, limits, &mut stack, &mut keys)?;
                }
                want_value = true;
            }
            Some(b'}') if top.object => {
                keys.truncate(top.keys_start);
                stack.pop();
                tokens += 1;
                i += 1;
            }
            Some(b']') if !top.object => {
                stack.pop();
                tokens += 1;
                i += 1;
            }
            _ => return None,
        }
        if tokens > limits.max_tokens {
            return None;
        }
    }
}

/// Reads the key starting with the `"` at `i`, and its `:`; returns where its value starts.
fn key(
    body: &[u8],
    i: usize,
    limits: &Limits,
    stack: &mut [Open],
    keys: &mut smallvec::SmallVec<[(usize, usize, u32); 32]>,
) -> Option<usize> {
    let n = body.len();
    let start = i + 1;
    let e = plain_run(body, start);
    if body.get(e) != Some(&b'"') || (e - start) as u64 > limits.max_key_length {
        return None;
    }
    let k = &body[start..e];
    if limits.block_proto && k == b"__proto__" {
        return None;
    }
    let top = stack.last_mut()?;
    top.count += 1;
    if top.count > limits.max_object_size || top.count as usize > MAX_KEYS {
        return None;
    }
    let h = key_hash(k);
    let mine = keys.get(top.keys_start..)?;
    if mine
        .iter()
        .any(|&(s, t, kh)| kh == h && body.get(s..t) == Some(k))
    {
        return None; // a duplicate: the scanner words it
    }
    keys.push((start, e, h));
    let mut j = e + 1;
    while j < n && is_space(body[j]) {
        j += 1;
    }
    if body.get(j) != Some(&b':') {
        return None;
    }
    Some(j + 1)
}

/// The end of the JSON number starting at `i`; `None` when it is malformed.
fn number(body: &[u8], mut i: usize) -> Option<usize> {
    let digit = |i: usize| body.get(i).is_some_and(u8::is_ascii_digit);
    if body.get(i) == Some(&b'-') {
        i += 1;
    }
    match body.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while digit(i) {
                i += 1;
            }
        }
        _ => return None,
    }
    if body.get(i) == Some(&b'.') {
        i += 1;
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    if matches!(body.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(body.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    // What follows a number must end it (the scanner refuses `01`, `1.2.3`, `1e5e`).
    match body.get(i) {
        None => Some(i),
        Some(b) if is_space(*b) || matches!(b, b',' | b']' | b'}') => Some(i),
        Some(_) => None,
    }
}

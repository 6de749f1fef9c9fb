//! What `jsonProtection` checks: the limits, and the first violation found.

/// The limits checked (Membrane's defaults in [`Limits::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most tokens (`{`, `}`, `[`, `]` and scalar values each count one; keys do not).
    pub max_tokens: u64,
    /// Most bytes.
    pub max_size: u64,
    /// Deepest nesting.
    pub max_depth: u64,
    /// Longest string value, in characters (an escape sequence counts one).
    pub max_string_length: u64,
    /// Longest key, in characters.
    pub max_key_length: u64,
    /// Most keys of one object.
    pub max_object_size: u64,
    /// Most elements of one array.
    pub max_array_size: u64,
    /// Reject the key `__proto__`.
    pub block_proto: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tokens: 10_000,
            max_size: 50 * 1024 * 1024,
            max_depth: 50,
            max_string_length: 262_144,
            max_key_length: 256,
            max_object_size: 1_000,
            max_array_size: 1_000,
            block_proto: true,
        }
    }
}

impl Limits {
    /// No limit at all (only validity and duplicate keys are checked).
    pub fn unlimited() -> Self {
        Limits {
            max_tokens: u64::MAX,
            max_size: u64::MAX,
            max_depth: u64::MAX,
            max_string_length: u64::MAX,
            max_key_length: u64::MAX,
            max_object_size: u64::MAX,
            max_array_size: u64::MAX,
            block_proto: false,
        }
    }
}

/// The first violation found, and the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The setting exceeded (`maxDepth`, ...), `duplicateKey`, or `invalid`.
    pub kind: &'static str,
    /// A sentence for the problem's detail.
    pub message: String,
    /// Byte offset in the body.
    pub offset: u64,
}

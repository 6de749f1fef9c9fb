//! `jsonProtection`: a JSON checker that reads the body once, byte by byte, without building a
//! document and without recursion (nesting lives in an explicit stack, so 100,000 nested arrays
//! cost memory, not stack), stopping at the first violation: invalid JSON, a duplicate key, or a
//! limit exceeded (Membrane's settings and defaults).
//!
//! [`Scanner`] is incremental: [`Scanner::feed`] takes the body in chunks of any size, so it can
//! also check a body while it streams.

use std::collections::HashSet;

use turnpike_core::problems;
use turnpike_core::{BodyInspected, BodyInspector, BodyNeed, Exchange, Outcome, Policy, Problem};

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{ByteSize, Flag};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

/// `jsonProtection`: rejects JSON request bodies that are invalid, have duplicate keys, or exceed
/// the limits (Membrane's settings and defaults).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JsonProtectionSettings {
    /// Most JSON tokens (braces, brackets and values each count one; keys do not, as in
    /// Membrane: `{"a":"b"}` has 3); default 10000.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Largest body; default 50MB.
    #[serde(default)]
    pub max_size: Option<ByteSize>,
    /// Deepest nesting of objects and arrays; default 50.
    #[serde(default)]
    pub max_depth: Option<u64>,
    /// Longest string (values and keys), in characters; default 262144.
    #[serde(default)]
    pub max_string_length: Option<u64>,
    /// Longest object key, in characters; default 256 (the stricter of this and
    /// `maxStringLength` applies).
    #[serde(default)]
    pub max_key_length: Option<u64>,
    /// Most keys in one object; default 1000.
    #[serde(default)]
    pub max_object_size: Option<u64>,
    /// Most elements in one array; default 1000.
    #[serde(default)]
    pub max_array_size: Option<u64>,
    /// Reject the key `__proto__` (prototype pollution in JavaScript backends); default true.
    #[serde(default)]
    pub block_proto: Option<Flag>,
    /// Describe the violation in the problem details (default true); `false` answers a bare 400
    /// problem without saying what was found.
    #[serde(default)]
    pub report_error: Option<Flag>,
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (top level, after `:` or `,` in an array).
    Value,
    /// A value or `]` (right after `[`).
    ValueOrEnd,
    /// A key or `}` (right after `{`).
    KeyOrEnd,
    /// A key (after `,` in an object).
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or the end of the container.
    CommaOrEnd,
    /// Only whitespace (the top-level value is complete).
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    Backslash,
    /// Inside `\uXXXX`: digits read so far and their value.
    Hex(u8, u32),
    /// After a high surrogate: expecting `\`.
    LowBackslash(u32),
    /// After a high surrogate and `\`: expecting `u`.
    LowU(u32),
    /// Inside the `\uXXXX` of the low surrogate.
    LowHex(u8, u32, u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    Structural,
    /// Inside a string.
    Str {
        key: bool,
        esc: Esc,
        /// UTF-8 continuation bytes still expected, and the allowed range of the next one.
        need: u8,
        lo: u8,
        hi: u8,
        len: u64,
    },
    Number(Num),
    Literal {
        word: &'static [u8],
        pos: u8,
    },
}

/// Keys of an object are compared by a linear scan up to this many, then through a hash set.
const LINEAR_KEYS: usize = 32;

#[derive(Debug)]
struct Frame {
    object: bool,
    count: u64,
    /// Where this object's keys start in the scanner's key arena.
    arena_start: usize,
    /// The keys so far, as ranges of the arena (until `set` takes over).
    keys: Vec<(usize, usize)>,
    /// The keys of a large object.
    set: Option<HashSet<Box<[u8]>>>,
}

impl Frame {
    /// Records `k`; false when the object has it already.
    fn insert_key(&mut self, arena: &mut Vec<u8>, k: &[u8]) -> bool {
        if let Some(set) = &mut self.set {
            return set.insert(k.into());
        }
        if self.keys.iter().any(|&(s, e)| &arena[s..e] == k) {
            return false;
        }
        let start = arena.len();
        arena.extend_from_slice(k);
        self.keys.push((start, arena.len()));
        if self.keys.len() > LINEAR_KEYS {
            let set = self.keys.iter().map(|&(s, e)| arena[s..e].into()).collect();
            self.set = Some(set);
            self.keys = Vec::new();
            arena.truncate(self.arena_start);
        }
        true
    }
}

/// An incremental JSON checker.
#[derive(Debug)]
pub struct Scanner {
    limits: Limits,
    expect: Expect,
    lex: Lex,
    stack: Vec<Frame>,
    tokens: u64,
    offset: u64,
    key: Vec<u8>,
    /// The keys of the open objects (each frame owns a tail of it).
    arena: Vec<u8>,
    failed: Option<Violation>,
}

impl Scanner {
    /// A scanner checking `limits`.
    pub fn new(limits: Limits) -> Self {
        Scanner {
            limits,
            expect: Expect::Value,
            lex: Lex::Structural,
            stack: Vec::new(),
            tokens: 0,
            offset: 0,
            key: Vec::new(),
            arena: Vec::new(),
            failed: None,
        }
    }

    /// Checks one complete body.
    pub fn check(limits: Limits, body: &[u8]) -> Result<(), Violation> {
        let mut s = Scanner::new(limits);
        s.feed(body)?;
        s.finish()
    }

    fn fail(&mut self, kind: &'static str, message: String) -> Violation {
        let v = Violation {
            kind,
            message,
            offset: self.offset,
        };
        self.failed = Some(v.clone());
        v
    }

    fn invalid(&mut self, what: &str) -> Violation {
        self.fail(
            "invalid",
            format!("invalid JSON at byte {}: {what}", self.offset),
        )
    }

    /// Checks the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), Violation> {
        // A whole everyday document in the first chunk: the quick pass, then the state the
        // byte-by-byte scan would have reached (a complete document; more chunks may only
        // bring whitespace).
        if self.offset == 0 && self.tokens == 0 && self.failed.is_none() {
            if let Some(tokens) = crate::json_quick::acceptable(chunk, &self.limits) {
                self.tokens = tokens;
                self.offset = chunk.len() as u64;
                self.expect = Expect::Done;
                return Ok(());
            }
        }
        self.scan(chunk)
    }

    /// [`Scanner::feed`] byte by byte.
    fn scan(&mut self, chunk: &[u8]) -> Result<(), Violation> {
        if let Some(v) = &self.failed {
            return Err(v.clone());
        }
        if self.offset.saturating_add(chunk.len() as u64) > self.limits.max_size {
            self.offset = self.offset.saturating_add(chunk.len() as u64);
            return Err(self.fail(
                "maxSize",
                format!("the body is larger than {} bytes", self.limits.max_size),
            ));
        }
        let mut i = 0;
        while i < chunk.len() {
            // Fast path: a run of plain ASCII inside a string (the bulk of most bodies).
            if let Lex::Str {
                key,
                esc: Esc::None,
                need: 0,
                len,
                ..
            } = self.lex
            {
                let start = i;
                while let Some(&b) = chunk.get(i) {
                    if b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b) {
                        break;
                    }
                    i += 1;
                }
                let run = (i - start) as u64;
                if run > 0 {
                    let max = if key {
                        self.limits.max_key_length
                    } else {
                        self.limits.max_string_length
                    };
                    if len + run > max {
                        // Point at the first character past the limit.
                        self.offset += max.saturating_sub(len);
                        return Err(self
                            .check_len(key, len + run, max)
                            .err()
                            .unwrap_or_else(|| self.invalid("string length")));
                    }
                    if key {
                        self.key.extend_from_slice(&chunk[start..i]);
                    }
                    if let Lex::Str { len: l, .. } = &mut self.lex {
                        *l = len + run;
                    }
                    self.offset += run;
                    continue;
                }
            }
            self.byte(chunk[i])?;
            self.offset += 1;
            i += 1;
        }
        Ok(())
    }

    /// Checks that the body ended with a complete value.
    pub fn finish(&mut self) -> Result<(), Violation> {
        if let Some(v) = &self.failed {
            return Err(v.clone());
        }
        if let Lex::Number(n) = self.lex {
            if matches!(n, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits) {
                self.lex = Lex::Structural;
                self.value_done()?;
            } else {
                return Err(self.invalid("unfinished number"));
            }
        }
        if self.lex != Lex::Structural || self.expect != Expect::Done {
            return Err(self.invalid("unexpected end of the body"));
        }
        Ok(())
    }

    fn token(&mut self) -> Result<(), Violation> {
        self.tokens += 1;
        if self.tokens > self.limits.max_tokens {
            return Err(self.fail(
                "maxTokens",
                format!("more than {} tokens", self.limits.max_tokens),
            ));
        }
        Ok(())
    }

    /// A value started where one is expected: counts it in its container.
    fn value_start(&mut self) -> Result<(), Violation> {
        match self.expect {
            Expect::Value | Expect::ValueOrEnd => {}
            _ => return Err(self.invalid("a value is not expected here")),
        }
        if let Some(f) = self.stack.last_mut() {
            if !f.object {
                f.count += 1;
                if f.count > self.limits.max_array_size {
                    let max = self.limits.max_array_size;
                    return Err(self.fail(
                        "maxArraySize",
                        format!("an array has more than {max} elements"),
                    ));
                }
            }
        }
        self.token()
    }

    fn value_done(&mut self) -> Result<(), Violation> {
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::CommaOrEnd
        };
        Ok(())
    }

    fn byte(&mut self, b: u8) -> Result<(), Violation> {
        match self.lex {
            Lex::Structural => self.structural(b),
            Lex::Str { .. } => self.string_byte(b),
            Lex::Number(n) => self.number_byte(n, b),
            Lex::Literal { word, pos } => {
                if word.get(pos as usize) != Some(&b) {
                    return Err(self.invalid("misspelled literal"));
                }
                if pos as usize + 1 == word.len() {
                    self.lex = Lex::Structural;
                    self.value_done()
                } else {
                    self.lex = Lex::Literal { word, pos: pos + 1 };
                    Ok(())
                }
            }
        }
    }

    fn structural(&mut self, b: u8) -> Result<(), Violation> {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => Ok(()),
            b'{' | b'[' => {
                self.value_start()?;
                if self.stack.len() as u64 >= self.limits.max_depth {
                    let max = self.limits.max_depth;
                    return Err(self.fail("maxDepth", format!("nesting deeper than {max}")));
                }
                let object = b == b'{';
                self.stack.push(Frame {
                    object,
                    count: 0,
                    arena_start: self.arena.len(),
                    keys: Vec::new(),
                    set: None,
                });
                self.expect = if object {
                    Expect::KeyOrEnd
                } else {
                    Expect::ValueOrEnd
                };
                Ok(())
            }
            b'}' | b']' => {
                let ok = match (self.expect, self.stack.last()) {
                    (Expect::KeyOrEnd, Some(f)) => f.object && b == b'}',
                    (Expect::ValueOrEnd, Some(f)) => !f.object && b == b']',
                    (Expect::CommaOrEnd, Some(f)) => f.object == (b == b'}'),
                    _ => false,
                };
                if !ok {
                    return Err(self.invalid("unexpected end of a container"));
                }
                if let Some(f) = self.stack.pop() {
                    self.arena.truncate(f.arena_start);
                }
                self.token()?;
                self.value_done()
            }
            b',' => {
                match (self.expect, self.stack.last()) {
                    (Expect::CommaOrEnd, Some(f)) => {
                        self.expect = if f.object { Expect::Key } else { Expect::Value };
                    }
                    _ => return Err(self.invalid("unexpected `,`")),
                }
                Ok(())
            }
            b':' => {
                if self.expect != Expect::Colon {
                    return Err(self.invalid("unexpected `:`"));
                }
                self.expect = Expect::Value;
                Ok(())
            }
            b'"' => {
                let key = matches!(self.expect, Expect::Key | Expect::KeyOrEnd);
                if key {
                    if let Some(f) = self.stack.last_mut() {
                        f.count += 1;
                        if f.count > self.limits.max_object_size {
                            let max = self.limits.max_object_size;
                            return Err(self.fail(
                                "maxObjectSize",
                                format!("an object has more than {max} keys"),
                            ));
                        }
                    }
                    self.key.clear();
                } else {
                    self.value_start()?;
                }
                self.lex = Lex::Str {
                    key,
                    esc: Esc::None,
                    need: 0,
                    lo: 0,
                    hi: 0,
                    len: 0,
                };
                Ok(())
            }
            b'-' | b'0'..=b'9' => {
                self.value_start()?;
                self.lex = Lex::Number(match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                });
                Ok(())
            }
            b't' | b'f' | b'n' => {
                self.value_start()?;
                let word: &'static [u8] = match b {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                self.lex = Lex::Literal { word, pos: 1 };
                Ok(())
            }
            _ => Err(self.invalid("unexpected character")),
        }
    }

    fn number_byte(&mut self, n: Num, b: u8) -> Result<(), Violation> {
        let next = match (n, b) {
            (Num::Minus, b'0') => Some(Num::Zero),
            (Num::Minus, b'1'..=b'9') => Some(Num::Int),
            (Num::Int, b'0'..=b'9') => Some(Num::Int),
            (Num::Zero | Num::Int, b'.') => Some(Num::Dot),
            (Num::Dot | Num::Frac, b'0'..=b'9') => Some(Num::Frac),
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Some(Num::Exp),
            (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
            (Num::Exp | Num::ExpSign | Num::ExpDigits, b'0'..=b'9') => Some(Num::ExpDigits),
            _ => None,
        };
        if let Some(n) = next {
            self.lex = Lex::Number(n);
            return Ok(());
        }
        if !matches!(n, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits) {
            return Err(self.invalid("malformed number"));
        }
        // The number ended; the byte belongs to what follows.
        self.lex = Lex::Structural;
        self.value_done()?;
        if b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'+' || b == b'e' || b == b'E' {
            return Err(self.invalid("malformed number"));
        }
        self.structural(b)
    }

    fn string_byte(&mut self, b: u8) -> Result<(), Violation> {
        let Lex::Str {
            key,
            esc,
            need,
            lo,
            hi,
            len,
        } = self.lex
        else {
            return Ok(());
        };
        // Characters, not bytes: UTF-8 continuation bytes and the rest of an escape sequence
        // do not count.
        let len = if need > 0 || esc != Esc::None {
            len
        } else {
            len + 1
        };
        let max = if key {
            self.limits.max_key_length
        } else {
            self.limits.max_string_length
        };
        let mut next = Lex::Str {
            key,
            esc: Esc::None,
            need: 0,
            lo: 0x80,
            hi: 0xBF,
            len,
        };
        let set = |lex: &mut Lex, e: Esc, nd: u8, l: u8, h: u8| {
            if let Lex::Str {
                esc, need, lo, hi, ..
            } = lex
            {
                *esc = e;
                *need = nd;
                *lo = l;
                *hi = h;
            }
        };
        if need > 0 {
            if b < lo || b > hi {
                return Err(self.invalid("invalid UTF-8"));
            }
            set(&mut next, Esc::None, need - 1, 0x80, 0xBF);
            if key {
                self.key.push(b);
            }
            self.lex = next;
            return self.check_len(key, len, max);
        }
        match esc {
            Esc::None => match b {
                b'"' => {
                    self.lex = Lex::Structural;
                    if key {
                        let k = &self.key;
                        let dup = match self.stack.last_mut() {
                            Some(f) => !f.insert_key(&mut self.arena, k),
                            None => false,
                        };
                        if dup {
                            let name = String::from_utf8_lossy(&self.key).into_owned();
                            return Err(self.fail(
                                "duplicateKey",
                                format!("the key `{name}` appears twice in one object"),
                            ));
                        }
                        if self.limits.block_proto && self.key == b"__proto__" {
                            return Err(self
                                .fail("blockProto", "the key `__proto__` is not allowed".into()));
                        }
                        self.expect = Expect::Colon;
                        return Ok(());
                    }
                    return self.value_done();
                }
                b'\\' => set(&mut next, Esc::Backslash, 0, 0, 0),
                0x00..=0x1F => return Err(self.invalid("control character in a string")),
                0x20..=0x7F => {
                    if key {
                        self.key.push(b);
                    }
                }
                0xC2..=0xDF => set(&mut next, Esc::None, 1, 0x80, 0xBF),
                0xE0 => set(&mut next, Esc::None, 2, 0xA0, 0xBF),
                0xE1..=0xEC | 0xEE..=0xEF => set(&mut next, Esc::None, 2, 0x80, 0xBF),
                0xED => set(&mut next, Esc::None, 2, 0x80, 0x9F),
                0xF0 => set(&mut next, Esc::None, 3, 0x90, 0xBF),
                0xF1..=0xF3 => set(&mut next, Esc::None, 3, 0x80, 0xBF),
                0xF4 => set(&mut next, Esc::None, 3, 0x80, 0x8F),
                _ => return Err(self.invalid("invalid UTF-8")),
            },
            Esc::Backslash => {
                let c = match b {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b'f' => 12,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        set(&mut next, Esc::Hex(0, 0), 0, 0, 0);
                        self.lex = next;
                        return self.check_len(key, len, max);
                    }
                    _ => return Err(self.invalid("invalid escape")),
                };
                if key {
                    self.key.push(c);
                }
            }
            Esc::Hex(n, v) | Esc::LowHex(n, _, v) => {
                let d = (b as char)
                    .to_digit(16)
                    .ok_or_else(|| self.invalid("invalid \\u escape"))?;
                let v = v * 16 + d;
                let high = match esc {
                    Esc::LowHex(_, h, _) => Some(h),
                    _ => None,
                };
                if n < 3 {
                    let e = match high {
                        Some(h) => Esc::LowHex(n + 1, h, v),
                        None => Esc::Hex(n + 1, v),
                    };
                    set(&mut next, e, 0, 0, 0);
                } else {
                    let cp = match high {
                        Some(h) => {
                            if !(0xDC00..=0xDFFF).contains(&v) {
                                return Err(self.invalid("lone leading surrogate"));
                            }
                            0x10000 + ((h - 0xD800) << 10) + (v - 0xDC00)
                        }
                        None if (0xD800..=0xDBFF).contains(&v) => {
                            set(&mut next, Esc::LowBackslash(v), 0, 0, 0);
                            self.lex = next;
                            return self.check_len(key, len, max);
                        }
                        None if (0xDC00..=0xDFFF).contains(&v) => {
                            return Err(self.invalid("lone trailing surrogate"));
                        }
                        None => v,
                    };
                    if key {
                        let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                        let mut buf = [0u8; 4];
                        self.key
                            .extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
            Esc::LowBackslash(h) => {
                if b != b'\\' {
                    return Err(self.invalid("lone leading surrogate"));
                }
                set(&mut next, Esc::LowU(h), 0, 0, 0);
            }
            Esc::LowU(h) => {
                if b != b'u' {
                    return Err(self.invalid("lone leading surrogate"));
                }
                set(&mut next, Esc::LowHex(0, h, 0), 0, 0, 0);
            }
        }
        self.lex = next;
        self.check_len(key, len, max)
    }

    fn check_len(&mut self, key: bool, len: u64, max: u64) -> Result<(), Violation> {
        if len > max {
            let (kind, what) = if key {
                ("maxKeyLength", "a key")
            } else {
                ("maxStringLength", "a string")
            };
            return Err(self.fail(kind, format!("{what} is longer than {max} bytes")));
        }
        Ok(())
    }
}

/// The compiled `jsonProtection` policy.
#[derive(Debug)]
pub struct JsonProtection {
    limits: Limits,
    report_error: bool,
}

fn problem(v: Violation, report_error: bool) -> Problem {
    let p = Problem::new(&problems::JSON_PROTECTION);
    if report_error {
        p.with_detail(v.message)
            .with_member("violation", v.kind.into())
            .with_member("offset", v.offset.into())
    } else {
        p
    }
}

/// Checks the body while the engine reads it, stopping at the first violation.
struct Inspector {
    scanner: Scanner,
    report_error: bool,
}

impl BodyInspector for Inspector {
    fn chunk(&mut self, data: &[u8]) -> Result<(), Box<Problem>> {
        self.scanner
            .feed(data)
            .map_err(|v| Box::new(problem(v, self.report_error)))
    }

    fn end(&mut self) -> Result<(), Box<Problem>> {
        if self.scanner.offset == 0 {
            return Ok(()); // An empty body passes.
        }
        self.scanner
            .finish()
            .map_err(|v| Box::new(problem(v, self.report_error)))
    }
}

impl PolicyFactory for JsonProtection {
    const NAME: &'static str = "jsonProtection";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = JsonProtectionSettings;

    /// Compiles the policy; every limit must be at least 1.
    fn compile(c: JsonProtectionSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let d = Limits::default();
        let pick = |v: Option<u64>, def: u64, key: &str| -> Result<u64, CompileError> {
            match v {
                Some(0) => Err(crate::err(key, "must be at least 1")),
                Some(n) => Ok(n),
                None => Ok(def),
            }
        };
        let max_string_length = pick(c.max_string_length, d.max_string_length, "maxStringLength")?;
        Ok(JsonProtection {
            limits: Limits {
                max_tokens: pick(c.max_tokens, d.max_tokens, "maxTokens")?,
                max_size: pick(c.max_size.map(|s| s.0), d.max_size, "maxSize")?,
                max_depth: pick(c.max_depth, d.max_depth, "maxDepth")?,
                max_string_length,
                // Keys are strings too: the stricter limit applies (as in Membrane).
                max_key_length: pick(c.max_key_length, d.max_key_length, "maxKeyLength")?
                    .min(max_string_length),
                max_object_size: pick(c.max_object_size, d.max_object_size, "maxObjectSize")?,
                max_array_size: pick(c.max_array_size, d.max_array_size, "maxArraySize")?,
                block_proto: c.block_proto.is_none_or(|f| f.0),
            },
            report_error: c.report_error.is_none_or(|f| f.0),
        })
    }
}

impl Policy for JsonProtection {
    fn name(&self) -> &'static str {
        "jsonProtection"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn body_inspector(&self) -> Option<Box<dyn BodyInspector>> {
        Some(Box::new(Inspector {
            scanner: Scanner::new(self.limits),
            report_error: self.report_error,
        }))
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        // Checked already while the engine read it (and not replaced since).
        if ex.extensions.get::<BodyInspected>().is_some() {
            return Outcome::Continue;
        }
        let Some(body) = ex.request_bytes() else {
            return Outcome::Continue;
        };
        if body.is_empty() {
            return Outcome::Continue;
        }
        match Scanner::check(self.limits, body) {
            Ok(()) => Outcome::Continue,
            Err(v) => Outcome::Reject(problem(v, self.report_error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> bool {
        Scanner::check(Limits::unlimited(), s.as_bytes()).is_ok()
    }

    fn kind(l: Limits, s: &[u8]) -> &'static str {
        Scanner::check(l, s).err().map_or("ok", |v| v.kind)
    }

    #[test]
    fn grammar() {
        for good in [
            "0",
            "-0",
            "1.5e+3",
            "[]",
            "{}",
            " {\"a\" : [1, true, false, null, \"x\"]} ",
            "\"\\u00e9\\ud83d\\ude00\\n\"",
            "\"é😀\"",
            "[[[]]]",
            "{\"a\":{\"b\":{}}}",
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            "",
            "01",
            "1.",
            "-",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1 2]",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"a\nb\"",
            "[]]",
            "{}{}",
            "+1",
            ".5",
            "1e",
            "{1:2}",
            "\"unterminated",
            "[",
            "\u{1}",
        ] {
            assert!(!ok(bad), "{bad:?}");
        }
        assert_eq!(kind(Limits::unlimited(), b"\"\xff\""), "invalid");
        assert_eq!(kind(Limits::unlimited(), b"\"\xed\xa0\x80\""), "invalid");
    }

    #[test]
    fn limits_and_duplicates() {
        let d = Limits::default();
        assert_eq!(kind(d, br#"{"a":1,"b":{"a":2},"a":3}"#), "duplicateKey");
        assert_eq!(kind(d, br#"{"a":1,"\u0061":3}"#), "duplicateKey");
        assert_eq!(kind(d, br#"{"a":1,"b":{"a":2}}"#), "ok");
        let deep = format!("{}{}", "[".repeat(51), "]".repeat(51));
        assert_eq!(kind(d, deep.as_bytes()), "maxDepth");
        let l = Limits { max_tokens: 4, ..d };
        assert_eq!(kind(l, b"[1,2]"), "ok");
        assert_eq!(kind(l, b"[1,2,3]"), "maxTokens");
        let l = Limits {
            max_string_length: 3,
            max_key_length: 2,
            ..d
        };
        assert_eq!(kind(l, br#"{"ab":"abc"}"#), "ok");
        assert_eq!(
            kind(l, "{\"ab\":\"\\n\u{e9}\u{1F600}\"}".as_bytes()),
            "ok",
            "characters, not bytes"
        );
        assert_eq!(kind(l, br#"{"ab":"abcd"}"#), "maxStringLength");
        assert_eq!(kind(l, br#"{"abc":1}"#), "maxKeyLength");
        // Keys are not tokens: {"a":"b"} has 3, as in Membrane.
        let l = Limits { max_tokens: 3, ..d };
        assert_eq!(kind(l, br#"{"a":"b"}"#), "ok");
        assert_eq!(kind(l, br#"{"a":"b","c":1}"#), "maxTokens");
        assert_eq!(kind(d, br#"{"__proto__":{}}"#), "blockProto");
        let l = Limits {
            block_proto: false,
            ..d
        };
        assert_eq!(kind(l, br#"{"__proto__":{}}"#), "ok");
        let long = format!("{{\"s\":\"{}\"}}", "x".repeat(5000));
        let l = Limits {
            max_string_length: 1000,
            ..d
        };
        let v = Scanner::check(l, long.as_bytes()).unwrap_err();
        assert_eq!(
            (v.kind, v.offset),
            ("maxStringLength", 1006),
            "the first byte past the limit"
        );
        let l = Limits {
            max_object_size: 2,
            max_array_size: 2,
            ..d
        };
        assert_eq!(kind(l, br#"{"a":[1,2],"b":2}"#), "ok");
        assert_eq!(kind(l, br#"{"a":1,"b":2,"c":3}"#), "maxObjectSize");
        assert_eq!(kind(l, b"[1,2,3]"), "maxArraySize");
        let l = Limits { max_size: 3, ..d };
        assert_eq!(kind(l, b"[1]"), "ok");
        assert_eq!(kind(l, b"[12]"), "maxSize");
    }

    #[test]
    fn hundred_thousand_nested_arrays_do_not_overflow() {
        let n = 100_000;
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        let l = Limits {
            max_depth: u64::MAX,
            max_tokens: u64::MAX,
            ..Limits::default()
        };
        assert_eq!(kind(l, deep.as_bytes()), "ok");
        assert_eq!(kind(Limits::default(), deep.as_bytes()), "maxDepth");
        let v = Scanner::check(Limits::default(), deep.as_bytes()).unwrap_err();
        assert_eq!(v.offset, 50, "stops at the first violation");
    }

    #[test]
    fn many_keys_switch_to_a_hash_set() {
        let keys: Vec<String> = (0..200)
            .map(|i| format!("\"k{i}\":{{\"k{i}\":{i}}}"))
            .collect();
        let doc = format!("{{{}}}", keys.join(","));
        assert_eq!(kind(Limits::default(), doc.as_bytes()), "ok");
        let dup = format!("{{{},\"k150\":1}}", keys.join(","));
        assert_eq!(kind(Limits::default(), dup.as_bytes()), "duplicateKey");
        let dup = format!("{{{},\"k3\":1}}", keys[..10].join(","));
        assert_eq!(kind(Limits::default(), dup.as_bytes()), "duplicateKey");
    }

    #[test]
    fn report_error_off_hides_the_details() {
        use turnpike_config::units::Flag;
        let quiet = JsonProtection::compile(
            JsonProtectionSettings {
                report_error: Some(Flag(false)),
                ..Default::default()
            },
            &crate::testutil::plain(),
        )
        .unwrap();
        let mut i = quiet.body_inspector().unwrap();
        let p = i.chunk(br#"{"a":1,"a":2}"#).unwrap_err().to_json();
        assert_eq!(p["status"], 400);
        assert!(
            p.get("violation").is_none() && p.get("detail").is_none(),
            "{p}"
        );
        let zero = JsonProtection::compile(
            JsonProtectionSettings {
                max_depth: Some(0),
                ..Default::default()
            },
            &crate::testutil::plain(),
        );
        assert_eq!(zero.unwrap_err().key, "maxDepth");
    }

    #[test]
    fn inspector_stops_at_the_first_violation() {
        let p =
            JsonProtection::compile(JsonProtectionSettings::default(), &crate::testutil::plain())
                .unwrap();
        let mut i = p.body_inspector().unwrap();
        assert!(i.end().is_ok(), "an empty body passes");
        let mut i = p.body_inspector().unwrap();
        i.chunk(b"[[[[").unwrap();
        let e = i.chunk(&[b'['; 100]).unwrap_err();
        assert_eq!(e.to_json()["violation"], "maxDepth");
        let mut i = p.body_inspector().unwrap();
        i.chunk(br#"{"a":"#).unwrap();
        assert_eq!(i.end().unwrap_err().to_json()["violation"], "invalid");
    }

    #[test]
    fn chunked_feeding_matches_whole() {
        let doc = br#"{"k\u00e9y": ["v\ud83d\ude00", 12.5e-3, true, null, {"x": -0}]}"#;
        for split in 0..doc.len() {
            let mut s = Scanner::new(Limits::default());
            s.feed(&doc[..split]).unwrap();
            s.feed(&doc[split..]).unwrap();
            s.finish().unwrap();
        }
    }

    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<i32>().prop_map(|n| n.to_string()),
            any::<f32>().prop_map(|f| format!("{f:?}")),
            "[a-z\\\\\"é😀\\x00-\\x1f]{0,6}".prop_map(|s| format!("\"{s}\"")),
            "\\\\u[0-9a-fA-F]{4}".prop_map(|s| format!("\"{s}\"")),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-c]{1,2}", inner), 0..4).prop_map(|v| {
                    let items: Vec<String> =
                        v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", items.join(","))
                }),
            ]
        })
    }

    fn agrees(bytes: &[u8]) {
        let ours = Scanner::check(Limits::unlimited(), bytes);
        let serde = serde_json::from_slice::<serde_json::Value>(bytes);
        match (&ours, &serde) {
            (Ok(()), Ok(_)) => {}
            (Err(v), Ok(_)) => assert_eq!(
                v.kind,
                "duplicateKey",
                "{:?}: {v:?}",
                String::from_utf8_lossy(bytes)
            ),
            (Ok(()), Err(e)) => {
                let m = e.to_string();
                assert!(
                    m.contains("out of range") || m.contains("recursion limit"),
                    "{:?}: serde says {m}",
                    String::from_utf8_lossy(bytes)
                );
            }
            (Err(_), Err(_)) => {}
        }
    }

    /// The quick pass accepts only what the byte-by-byte scan accepts, with the same count of
    /// tokens, under `limits`.
    fn quick_agrees(bytes: &[u8], limits: Limits) {
        if let Some(tokens) = crate::json_quick::acceptable(bytes, &limits) {
            let mut s = Scanner::new(limits);
            let scanned = s.scan(bytes).and_then(|()| s.finish());
            assert!(
                scanned.is_ok(),
                "{:?}: quick accepts, the scan says {scanned:?}",
                String::from_utf8_lossy(bytes)
            );
            assert_eq!(tokens, s.tokens, "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    fn tight() -> Limits {
        Limits {
            max_tokens: 12,
            max_size: 60,
            max_depth: 3,
            max_string_length: 3,
            max_key_length: 2,
            max_object_size: 3,
            max_array_size: 3,
            block_proto: true,
        }
    }

    #[test]
    fn the_quick_pass_takes_everyday_bodies() {
        let body = br#"{"person":{"firstName":"Jane","height":172,"newsletter":true,"x":null,"hobby":["chess","hiking"],"n":-1.5e3,"e":{},"a":[]}}"#;
        assert!(crate::json_quick::acceptable(body, &Limits::default()).is_some());
        assert!(crate::json_quick::acceptable(b" [1, 2] \n", &Limits::default()).is_some());
        // Left to the scan: escapes, a duplicate, a number that may go on, a limit.
        for b in [
            &br#"{"a":"\n"}"#[..],
            br#"{"a":1,"a":2}"#,
            b"12",
            br#"{"__proto__":1}"#,
        ] {
            assert!(crate::json_quick::acceptable(b, &Limits::default()).is_none());
        }
        // Fed as one chunk, the scanner ends in the same state either way.
        let mut quick = Scanner::new(Limits::default());
        quick.feed(body).unwrap();
        quick.feed(b"  ").unwrap();
        quick.finish().unwrap();
        assert!(quick.feed(b"1").is_err());
    }

    proptest! {
        #[test]
        fn the_quick_pass_agrees_with_the_scan(text in json_text(), cut in 0usize..200, junk in "[ ,:\\]\\}\\[\\{\"0-9a-z.+_-]{0,3}") {
            for limits in [Limits::default(), tight(), Limits::unlimited()] {
                quick_agrees(text.as_bytes(), limits);
                let b = text.as_bytes();
                let cut = cut.min(b.len());
                let mut mutated = b[..cut].to_vec();
                mutated.extend_from_slice(junk.as_bytes());
                mutated.extend_from_slice(&b[cut..]);
                quick_agrees(&mutated, limits);
            }
        }

        #[test]
        fn the_quick_pass_agrees_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            quick_agrees(&bytes, Limits::default());
            quick_agrees(&bytes, tight());
        }

        #[test]
        fn never_panics_and_agrees_with_serde_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            agrees(&bytes);
        }

        #[test]
        fn agrees_with_serde_on_json_like_text(text in json_text(), cut in 0usize..200, junk in "[ ,:\\]\\}\\[\\{\"0-9a-z.+-]{0,3}") {
            agrees(text.as_bytes());
            let b = text.as_bytes();
            let cut = cut.min(b.len());
            let mut mutated = b[..cut].to_vec();
            mutated.extend_from_slice(junk.as_bytes());
            mutated.extend_from_slice(&b[cut..]);
            agrees(&mutated);
        }
    }
}

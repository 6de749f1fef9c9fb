//! `jsonProtection`: a JSON checker that reads the body once, byte by byte, without building a
//! document and without recursion (nesting lives in an explicit stack, so 100,000 nested arrays
//! cost memory, not stack), stopping at the first violation: invalid JSON, a duplicate key, or a
//! limit exceeded (Membrane's settings and defaults).
//!
//! [`Scanner`] is incremental: [`Scanner::feed`] takes the body in chunks of any size, so it can
//! also check a body while it streams.

use std::collections::HashSet;

use super::limits::{Limits, Violation};
use super::quick;

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
    pub(super) tokens: u64,
    pub(super) offset: u64,
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

    /// The tokens of one complete body scanned byte by byte (never the quick pass): what the
    /// fuzzer compares the quick pass with.
    #[doc(hidden)]
    pub fn tokens(limits: Limits, body: &[u8]) -> Result<u64, Violation> {
        let mut s = Scanner::new(limits);
        s.scan(body)?;
        s.finish()?;
        Ok(s.tokens)
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
            if let Some(tokens) = quick::acceptable(chunk, &self.limits) {
                self.tokens = tokens;
                self.offset = chunk.len() as u64;
                self.expect = Expect::Done;
                return Ok(());
            }
        }
        self.scan(chunk)
    }

    /// [`Scanner::feed`] byte by byte.
    pub(super) fn scan(&mut self, chunk: &[u8]) -> Result<(), Violation> {
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

//! TLS record protection after the handshake (RFC 8446 §5, RFC 5246 §6.2.3.3, RFC 7905).
//!
//! rustls runs the handshake and hands over the traffic secrets (its `kernel` API); from
//! then on [`RecordKey`] seals and opens application records itself, in place in the
//! stream's buffers (or, opening, in the reader's buffer with the plaintext moved to the
//! front as it is decrypted), with ring's AEADs. rustls 0.23 allocates and copies every record it
//! protects; this does neither.
//!
//! The handshake runs on aws-lc-rs (see [`crate::provider`]), the records on ring. ring's
//! AES-GCM is a little slower than aws-lc's in a tight loop, but it is a few kilobytes of
//! machine code, where aws-lc's AVX-512 path is about 680 KB. Between two records the gateway
//! runs hyper, tokio and the kernel, so aws-lc's code comes back from memory on every call:
//! in the running gateway, ring's four operations per proxied request cost 0.15–0.3 µs less
//! (run 25 in `docs/benchmarks.md`). ring also keeps a key inside its [`LessSafeKey`], so a
//! connection's keys sit in its stream instead of in two separate allocations.
//!
//! Nonces are the IV XORed with the record's sequence number, as both RFCs define; a key is
//! only ever used with increasing sequence numbers, and a direction refuses to go on before
//! its number would wrap.
//!
//! TLS 1.3 records sealed with AES-GCM are padded with zeros (RFC 8446 §5.4) so that what is
//! encrypted, the content and its type byte, fills whole 16-byte AES blocks. ring encrypts and
//! authenticates a partial last block with two extra calls (one block of AES, one of GHASH);
//! padding costs at most 15 bytes on the wire and saves 20–40 ns per record in a warm loop
//! (sealing a 1,157-byte record takes 220 ns, a padded one of 1,168 bytes 182 ns; run 30 in
//! `docs/benchmarks.md`).

use std::ops::Range;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use ring::aead::{CHACHA20_POLY1305, NONCE_LEN};
use rustls::{AlertDescription, ConnectionTrafficSecrets, ContentType, ProtocolVersion};

/// Length of a record header: type, legacy version, length.
pub(crate) const HEADER_LEN: usize = 5;
/// Most plaintext one record carries.
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// Most ciphertext a TLS 1.2 record may carry (TLS 1.3 allows less).
pub(crate) const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 2048;
/// TLS 1.3's bound on a record's ciphertext.
const MAX_CIPHERTEXT_TLS13: usize = MAX_PLAINTEXT + 256;
const TAG_LEN: usize = 16;
/// AES's block size: TLS 1.3 AES-GCM records are padded to a whole number of blocks.
const AES_BLOCK: usize = 16;
/// Length of the explicit nonce that TLS 1.2's AES-GCM suites put in front of each record.
const EXPLICIT_NONCE_LEN: usize = 8;
/// A direction stops here, well before its sequence number could wrap (rustls's soft limit).
const SEQ_LIMIT: u64 = 0xffff_ffff_ffff_0000;
/// The record version every record after the handshake carries.
const LEGACY_VERSION: [u8; 2] = [0x03, 0x03];

/// The protocol version records are protected for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    Tls12,
    Tls13,
}

impl Version {
    /// The version rustls negotiated, or `None` for one without a record layer here.
    pub(crate) fn of(v: ProtocolVersion) -> Option<Self> {
        match v {
            ProtocolVersion::TLSv1_2 => Some(Version::Tls12),
            ProtocolVersion::TLSv1_3 => Some(Version::Tls13),
            _ => None,
        }
    }
}

/// Why a record could not be opened or sealed: the alert the peer should get (none when
/// the peer's own fatal alert ended the connection) and what went wrong.
#[derive(Debug)]
pub(crate) struct RecordError {
    pub(crate) alert: Option<AlertDescription>,
    pub(crate) message: String,
}

impl RecordError {
    /// Only on a failure: kept out of line, away from the record code that runs every time.
    #[cold]
    #[inline(never)]
    pub(crate) fn new(alert: AlertDescription, message: impl Into<String>) -> Self {
        RecordError {
            alert: Some(alert),
            message: message.into(),
        }
    }
}

/// The AEADs records are protected with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aead {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// The key, IV and sequence number of one direction of a connection. The fields a record
/// reads first (`repr(C)`) come right before ring's key, so that they share its first cache
/// lines.
#[repr(C)]
pub(crate) struct RecordKey {
    seq: u64,
    iv: [u8; NONCE_LEN],
    version: Version,
    /// TLS 1.2 with AES-GCM: each record carries an explicit nonce.
    explicit_nonce: bool,
    /// TLS 1.3 with AES-GCM: records are padded to whole AES blocks.
    pad_to_blocks: bool,
    key: LessSafeKey,
}

impl RecordKey {
    /// Builds one direction from the secrets rustls extracted (or derived at a key update),
    /// starting at sequence number `seq`. Fails for a cipher suite without a sealer here.
    pub(crate) fn new(
        version: Version,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Result<Self, RecordError> {
        let (aead, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Aead::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Aead::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Aead::Chacha20Poly1305, key, iv)
            }
            _ => {
                return Err(RecordError::new(
                    AlertDescription::InternalError,
                    "the negotiated cipher suite has no record protection here",
                ))
            }
        };
        Self::from_parts(version, seq, aead, key.as_ref(), iv.as_ref())
    }

    fn from_parts(
        version: Version,
        seq: u64,
        aead: Aead,
        key: &[u8],
        iv: &[u8],
    ) -> Result<Self, RecordError> {
        let internal = |what: &str| {
            RecordError::new(
                AlertDescription::InternalError,
                format!("bad traffic secret: {what}"),
            )
        };
        let alg = match aead {
            Aead::Aes128Gcm => &AES_128_GCM,
            Aead::Aes256Gcm => &AES_256_GCM,
            Aead::Chacha20Poly1305 => &CHACHA20_POLY1305,
        };
        let key = UnboundKey::new(alg, key).map_err(|_| internal("key"))?;
        let iv: [u8; NONCE_LEN] = iv.try_into().map_err(|_| internal("IV"))?;
        Ok(RecordKey {
            key: LessSafeKey::new(key),
            iv,
            seq: seq_checked(seq)?,
            version,
            explicit_nonce: version == Version::Tls12 && aead != Aead::Chacha20Poly1305,
            pad_to_blocks: version == Version::Tls13 && aead != Aead::Chacha20Poly1305,
        })
    }

    /// The sequence number of the next record.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Bytes of a record in front of its plaintext: the header and, for TLS 1.2's AES-GCM,
    /// the explicit nonce.
    pub(crate) fn prefix_len(&self) -> usize {
        HEADER_LEN
            + if self.explicit_nonce {
                EXPLICIT_NONCE_LEN
            } else {
                0
            }
    }

    /// Bytes of a record after `plain_len` bytes of plaintext: in TLS 1.3 the inner content
    /// type and any padding, then the tag.
    pub(crate) fn suffix_len(&self, plain_len: usize) -> usize {
        TAG_LEN
            + match self.version {
                Version::Tls12 => 0,
                Version::Tls13 => 1 + self.padding(plain_len),
            }
    }

    /// Zeros after the inner content type of a TLS 1.3 record of `plain_len` bytes of
    /// plaintext: with AES-GCM, up to a whole number of AES blocks, as long as the inner
    /// plaintext stays within the 2^14 + 1 bytes RFC 8446 §5.4 allows.
    fn padding(&self, plain_len: usize) -> usize {
        if !self.pad_to_blocks {
            return 0;
        }
        let inner = plain_len + 1;
        let pad = inner.wrapping_neg() % AES_BLOCK;
        if inner + pad > MAX_PLAINTEXT + 1 {
            0
        } else {
            pad
        }
    }

    fn nonce(&self) -> [u8; NONCE_LEN] {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        nonce
    }

    /// TLS 1.2's additional data: sequence number, type, version and plaintext length.
    fn aad12(&self, typ: u8, len: usize) -> [u8; 13] {
        let mut aad = [0u8; 13];
        aad[..8].copy_from_slice(&self.seq.to_be_bytes());
        aad[8] = typ;
        aad[9..11].copy_from_slice(&LEGACY_VERSION);
        aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
        aad
    }

    /// Seals one record of content type `typ` in place. `record` is the whole record:
    /// [`prefix_len`](Self::prefix_len) bytes, then `plain_len` bytes of plaintext (at most
    /// [`MAX_PLAINTEXT`]), then [`suffix_len`](Self::suffix_len) bytes; the header, nonce,
    /// inner type, padding and tag are written here.
    pub(crate) fn seal(
        &mut self,
        typ: ContentType,
        record: &mut [u8],
        plain_len: usize,
    ) -> Result<(), RecordError> {
        let fail = || RecordError::new(AlertDescription::InternalError, "sealing a record failed");
        seq_checked(self.seq)?;
        let prefix = self.prefix_len();
        let body_len = record.len() - HEADER_LEN;
        debug_assert!(plain_len <= MAX_PLAINTEXT);
        debug_assert_eq!(
            record.len(),
            prefix + plain_len + self.suffix_len(plain_len)
        );
        let nonce = self.nonce();
        let typ = u8::from(typ);
        record[1..3].copy_from_slice(&LEGACY_VERSION);
        record[3..5].copy_from_slice(&(body_len as u16).to_be_bytes());
        let tag_at = record.len() - TAG_LEN;
        let tag = match self.version {
            Version::Tls13 => {
                record[0] = u8::from(ContentType::ApplicationData);
                record[prefix + plain_len] = typ;
                record[prefix + plain_len + 1..tag_at].fill(0);
                let (header, rest) = record.split_at_mut(HEADER_LEN);
                self.key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(&*header),
                        &mut rest[..tag_at - HEADER_LEN],
                    )
                    .map_err(|_| fail())?
            }
            Version::Tls12 => {
                record[0] = typ;
                if self.explicit_nonce {
                    record[HEADER_LEN..prefix].copy_from_slice(&nonce[NONCE_LEN - 8..]);
                }
                self.key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(self.aad12(typ, plain_len)),
                        &mut record[prefix..tag_at],
                    )
                    .map_err(|_| fail())?
            }
        };
        record[tag_at..].copy_from_slice(tag.as_ref());
        self.seq += 1;
        Ok(())
    }

    /// Opens the record `record` (header included, exactly as long as its header says) in
    /// place. Returns its content type and where its plaintext now lies within `record`.
    pub(crate) fn open(
        &mut self,
        record: &mut [u8],
    ) -> Result<(ContentType, Range<usize>), RecordError> {
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&record[..HEADER_LEN]);
        let (typ, len) = self.open_to(header, &mut record[HEADER_LEN..], 0)?;
        Ok((typ, HEADER_LEN..HEADER_LEN + len))
    }

    /// Opens one record whose header is `header` and whose body (all that follows the header)
    /// is `in_out[src..]`, writing its plaintext to the front of `in_out` as it decrypts
    /// (`src` 0: in place). Returns the content type and the plaintext's length `n`: the
    /// plaintext is `in_out[..n]`.
    pub(crate) fn open_to(
        &mut self,
        header: [u8; HEADER_LEN],
        in_out: &mut [u8],
        src: usize,
    ) -> Result<(ContentType, usize), RecordError> {
        let bad_mac =
            || RecordError::new(AlertDescription::BadRecordMac, "record failed to decrypt");
        seq_checked(self.seq)?;
        let outer = header[0];
        let body_len = in_out.len() - src;
        let nonce = self.nonce();
        let (typ, len) = match self.version {
            Version::Tls13 => {
                if outer != u8::from(ContentType::ApplicationData) {
                    return Err(RecordError::new(
                        AlertDescription::UnexpectedMessage,
                        format!("unprotected record of type {outer} after the handshake"),
                    ));
                }
                if body_len > MAX_CIPHERTEXT_TLS13 {
                    return Err(RecordError::new(
                        AlertDescription::RecordOverflow,
                        "record longer than TLS 1.3 allows",
                    ));
                }
                let inner = self
                    .key
                    .open_within(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(header),
                        in_out,
                        src..,
                    )
                    .map_err(|_| bad_mac())?;
                // The inner content type is the last byte that is not padding.
                let Some(at) = inner.iter().rposition(|&b| b != 0) else {
                    return Err(RecordError::new(
                        AlertDescription::UnexpectedMessage,
                        "record without a content type",
                    ));
                };
                (inner[at], at)
            }
            Version::Tls12 => {
                let explicit = self.prefix_len() - HEADER_LEN;
                if body_len < explicit + TAG_LEN {
                    return Err(bad_mac());
                }
                let plain_len = body_len - explicit - TAG_LEN;
                let mut nonce = nonce;
                if self.explicit_nonce {
                    nonce[NONCE_LEN - 8..].copy_from_slice(&in_out[src..src + explicit]);
                }
                let aad = self.aad12(outer, plain_len);
                self.key
                    .open_within(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        in_out,
                        src + explicit..,
                    )
                    .map_err(|_| bad_mac())?;
                (outer, plain_len)
            }
        };
        if len > MAX_PLAINTEXT {
            return Err(RecordError::new(
                AlertDescription::RecordOverflow,
                "record plaintext longer than 2^14 bytes",
            ));
        }
        self.seq += 1;
        Ok((ContentType::from(typ), len))
    }
}

fn seq_checked(seq: u64) -> Result<u64, RecordError> {
    if seq >= SEQ_LIMIT {
        return Err(RecordError::new(
            AlertDescription::InternalError,
            "record sequence number exhausted",
        ));
    }
    Ok(seq)
}

/// The length a record's header announces, once `bytes` holds the header. Fails when it is
/// more than any record may carry.
pub(crate) fn announced_len(bytes: &[u8]) -> Result<Option<usize>, RecordError> {
    if bytes.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
    if len > MAX_CIPHERTEXT {
        return Err(RecordError::new(
            AlertDescription::RecordOverflow,
            "record longer than TLS allows",
        ));
    }
    Ok(Some(HEADER_LEN + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(version: Version, seq: u64, kind: u8) -> RecordKey {
        let (aead, len) = match kind {
            0 => (Aead::Aes128Gcm, 16),
            1 => (Aead::Aes256Gcm, 32),
            _ => (Aead::Chacha20Poly1305, 32),
        };
        RecordKey::from_parts(version, seq, aead, &vec![kind + 1; len], &[7; 12]).unwrap()
    }

    fn seal(key: &mut RecordKey, typ: ContentType, plain: &[u8]) -> Vec<u8> {
        let mut record = vec![0u8; key.prefix_len() + plain.len() + key.suffix_len(plain.len())];
        let p = key.prefix_len();
        record[p..p + plain.len()].copy_from_slice(plain);
        key.seal(typ, &mut record, plain.len()).unwrap();
        record
    }

    #[test]
    fn records_round_trip_in_every_version_and_suite() {
        for version in [Version::Tls12, Version::Tls13] {
            for kind in 0..3 {
                let mut tx = key(version, 5, kind);
                let mut rx = key(version, 5, kind);
                for (i, len) in [0usize, 1, 100, MAX_PLAINTEXT].into_iter().enumerate() {
                    let plain: Vec<u8> = (0..len).map(|b| (b * 31 + i) as u8).collect();
                    let typ = if i == 1 {
                        ContentType::Alert
                    } else {
                        ContentType::ApplicationData
                    };
                    let mut record = seal(&mut tx, typ, &plain);
                    assert_eq!(
                        announced_len(&record).unwrap(),
                        Some(record.len()),
                        "{version:?}"
                    );
                    if version == Version::Tls13 {
                        assert_eq!(record[0], 23, "TLS 1.3 hides the type");
                    } else {
                        assert_eq!(record[0], u8::from(typ));
                    }
                    let p = tx.prefix_len();
                    if len > 0 {
                        assert_ne!(&record[p..p + len], &plain[..], "not encrypted");
                    }
                    let (got, range) = rx.open(&mut record).unwrap();
                    assert_eq!(got, typ);
                    assert_eq!(&record[range], &plain[..]);
                }
                assert_eq!(tx.seq(), 9);
                assert_eq!(rx.seq(), 9);
            }
        }
    }

    #[test]
    fn a_changed_byte_or_a_replayed_record_fails_to_open() {
        for version in [Version::Tls12, Version::Tls13] {
            let mut tx = key(version, 0, 0);
            let record = seal(&mut tx, ContentType::ApplicationData, b"hello world");
            for at in 0..record.len() {
                if (1..5).contains(&at) && version == Version::Tls12 {
                    continue; // the version and length fields are not in TLS 1.2's data
                }
                let mut rx = key(version, 0, 0);
                let mut bad = record.clone();
                bad[at] ^= 0x40;
                assert!(rx.open(&mut bad).is_err(), "{version:?} byte {at}");
            }
            // Sequence numbers are part of the nonce: the same record a second time fails.
            let mut rx = key(version, 0, 0);
            assert!(rx.open(&mut record.clone()).is_ok());
            let err = rx.open(&mut record.clone()).unwrap_err();
            assert_eq!(err.alert, Some(AlertDescription::BadRecordMac));
        }
    }

    /// A TLS 1.3 record whose inner plaintext (content, type, padding) is `inner`.
    fn raw13(tx: &mut RecordKey, inner: &[u8]) -> Vec<u8> {
        let mut record = vec![0u8; HEADER_LEN + inner.len() + TAG_LEN];
        record[0] = 23;
        record[1..3].copy_from_slice(&LEGACY_VERSION);
        record[3..5].copy_from_slice(&((inner.len() + TAG_LEN) as u16).to_be_bytes());
        let (header, body) = record.split_at_mut(HEADER_LEN);
        body[..inner.len()].copy_from_slice(inner);
        let tag = tx
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(tx.nonce()),
                Aad::from(&*header),
                &mut body[..inner.len()],
            )
            .unwrap();
        body[inner.len()..].copy_from_slice(tag.as_ref());
        tx.seq += 1;
        record
    }

    #[test]
    fn tls13_padding_is_stripped_and_a_missing_type_is_refused() {
        let mut tx = key(Version::Tls13, 0, 2);
        let mut rx = key(Version::Tls13, 0, 2);
        let mut record = raw13(&mut tx, b"h\0i\x16\0\0\0\0");
        let (typ, range) = rx.open(&mut record).unwrap();
        assert_eq!(typ, ContentType::Handshake);
        assert_eq!(&record[range], b"h\0i");
        let mut record = raw13(&mut tx, &[0; 9]);
        let err = rx.open(&mut record).unwrap_err();
        assert_eq!(err.alert, Some(AlertDescription::UnexpectedMessage));
    }

    #[test]
    fn tls13_aes_gcm_records_are_padded_to_whole_blocks() {
        for kind in 0..3 {
            let mut tx = key(Version::Tls13, 0, kind);
            let mut rx = key(Version::Tls13, 0, kind);
            let lens = (0..40).chain([1_171, 1_184, MAX_PLAINTEXT - 16, MAX_PLAINTEXT - 1]);
            for len in lens.chain([MAX_PLAINTEXT]) {
                let plain: Vec<u8> = (0..len).map(|b| (b % 251) as u8 + 1).collect();
                let mut record = seal(&mut tx, ContentType::ApplicationData, &plain);
                let inner = record.len() - HEADER_LEN - TAG_LEN;
                if kind == 2 {
                    assert_eq!(inner, len + 1, "ChaCha20 records are not padded");
                } else if len == MAX_PLAINTEXT {
                    assert_eq!(inner, len + 1, "no room for padding within 2^14 + 1 bytes");
                } else {
                    assert_eq!(inner % AES_BLOCK, 0, "AES-GCM record of {len} bytes");
                    assert!(inner - (len + 1) < AES_BLOCK, "at most 15 bytes of padding");
                }
                let (typ, range) = rx.open(&mut record).unwrap();
                assert_eq!(typ, ContentType::ApplicationData);
                assert_eq!(&record[range], &plain[..]);
            }
        }
        // TLS 1.2 has no padding: its additional data states the plaintext's length.
        let mut tx = key(Version::Tls12, 0, 1);
        let record = seal(&mut tx, ContentType::ApplicationData, &[1; 20]);
        assert_eq!(record.len(), HEADER_LEN + 8 + 20 + TAG_LEN);
    }

    #[test]
    fn oversized_and_unprotected_records_are_refused() {
        let mut header = [23u8, 3, 3, 0, 0];
        header[3..].copy_from_slice(&((MAX_CIPHERTEXT + 1) as u16).to_be_bytes());
        let err = announced_len(&header).unwrap_err();
        assert_eq!(err.alert, Some(AlertDescription::RecordOverflow));
        assert_eq!(announced_len(&header[..4]).unwrap(), None);

        let mut rx = key(Version::Tls13, 0, 0);
        let mut ccs = vec![20u8, 3, 3, 0, 1, 1];
        let err = rx.open(&mut ccs).unwrap_err();
        assert_eq!(err.alert, Some(AlertDescription::UnexpectedMessage));

        let mut long = vec![0u8; HEADER_LEN + MAX_CIPHERTEXT_TLS13 + 1];
        long[0] = 23;
        let err = rx.open(&mut long).unwrap_err();
        assert_eq!(err.alert, Some(AlertDescription::RecordOverflow));
    }

    #[test]
    fn a_direction_stops_before_its_sequence_number_wraps() {
        let mut tx = key(Version::Tls13, SEQ_LIMIT - 1, 0);
        let mut record = vec![0u8; tx.prefix_len() + 1 + tx.suffix_len(1)];
        assert!(tx
            .seal(ContentType::ApplicationData, &mut record, 1)
            .is_ok());
        assert!(tx
            .seal(ContentType::ApplicationData, &mut record, 1)
            .is_err());
        assert!(RecordKey::from_parts(
            Version::Tls13,
            SEQ_LIMIT,
            Aead::Aes128Gcm,
            &[0; 16],
            &[0; 12]
        )
        .is_err());
    }

    proptest::proptest! {
        /// Whatever arrives, opening either fails or yields exactly what was sealed; it never
        /// panics, and a forged or damaged record never opens.
        #[test]
        fn arbitrary_records_never_open(
            tls13 in proptest::bool::ANY,
            kind in 0u8..3,
            typ in proptest::num::u8::ANY,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
        ) {
            let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
            let mut rx = key(version, 0, kind);
            let mut record = vec![typ, 3, 3];
            record.extend_from_slice(&(body.len() as u16).to_be_bytes());
            record.extend_from_slice(&body);
            proptest::prop_assert_eq!(announced_len(&record).unwrap(), Some(record.len()));
            proptest::prop_assert!(rx.open(&mut record).is_err());
        }

        /// What this module seals, another implementation opens: aws-lc-rs's AEAD, given
        /// the key, the nonce and the additional data as RFC 8446 §5.2-5.3 and RFC 5246
        /// §6.2.3.3 define them, computed here independently of the sealing code.
        #[test]
        fn sealed_records_open_with_aws_lc(
            tls13 in proptest::bool::ANY,
            kind in 0u8..3,
            seq in 0u64..1 << 40,
            plain in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        ) {
            use aws_lc_rs::aead as lc;
            let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
            let mut tx = key(version, seq, kind);
            let mut record = seal(&mut tx, ContentType::ApplicationData, &plain);
            let (alg, len): (&'static lc::Algorithm, usize) = match kind {
                0 => (&lc::AES_128_GCM, 16),
                1 => (&lc::AES_256_GCM, 32),
                _ => (&lc::CHACHA20_POLY1305, 32),
            };
            let other =
                lc::LessSafeKey::new(lc::UnboundKey::new(alg, &vec![kind + 1; len]).unwrap());
            let mut nonce = [7u8; 12];
            for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
                *n ^= s;
            }
            let opened: Vec<u8> = if tls13 {
                let (header, body) = record.split_at_mut(HEADER_LEN);
                let nonce = lc::Nonce::assume_unique_for_key(nonce);
                let inner = other.open_in_place(nonce, lc::Aad::from(&*header), body).unwrap();
                // RFC 8446 §5.4: content, type, zeros. AES-GCM pads to whole blocks.
                let at = inner.iter().rposition(|&b| b != 0).unwrap();
                proptest::prop_assert_eq!(inner[at], 23, "inner content type");
                proptest::prop_assert_eq!(at, plain.len(), "only zeros follow the type");
                let blocks = if kind < 2 { 16 } else { 1 };
                proptest::prop_assert_eq!(inner.len() % blocks, 0, "padded to whole blocks");
                inner[..at].to_vec()
            } else {
                let explicit = kind < 2;
                if explicit {
                    // AES-GCM in TLS 1.2: the record carries the nonce's last eight bytes.
                    proptest::prop_assert_eq!(&record[HEADER_LEN..HEADER_LEN + 8], &nonce[4..]);
                }
                let start = HEADER_LEN + if explicit { 8 } else { 0 };
                let mut aad = seq.to_be_bytes().to_vec();
                aad.extend_from_slice(&[23, 3, 3]);
                aad.extend_from_slice(&(plain.len() as u16).to_be_bytes());
                let nonce = lc::Nonce::assume_unique_for_key(nonce);
                other
                    .open_in_place(nonce, lc::Aad::from(aad), &mut record[start..])
                    .unwrap()
                    .to_vec()
            };
            proptest::prop_assert_eq!(opened, plain);
        }

        /// A record opened away from where it arrived (its plaintext written `shift` bytes
        /// before its body, as a stream does in its reader's buffer) yields what was sealed,
        /// and leaves the bytes before the plaintext alone.
        #[test]
        fn records_open_to_the_front_of_a_larger_buffer(
            tls13 in proptest::bool::ANY,
            kind in 0u8..3,
            before in 0usize..64,
            shift in 0usize..2000,
            plain in proptest::collection::vec(proptest::num::u8::ANY, 0..1200),
        ) {
            let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
            let mut tx = key(version, 9, kind);
            let mut rx = key(version, 9, kind);
            let record = seal(&mut tx, ContentType::ApplicationData, &plain);
            // `before` bytes the open must not touch, `shift` bytes of room, the record.
            let mut buf = vec![0x5au8; before + shift];
            buf.extend_from_slice(&record);
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&record[..HEADER_LEN]);
            let (typ, n) = rx
                .open_to(header, &mut buf[before..], shift + HEADER_LEN)
                .unwrap();
            proptest::prop_assert_eq!(typ, ContentType::ApplicationData);
            proptest::prop_assert_eq!(&buf[before..before + n], &plain[..]);
            proptest::prop_assert!(buf[..before].iter().all(|&b| b == 0x5a));
        }

        #[test]
        fn damaged_records_never_open(
            tls13 in proptest::bool::ANY,
            kind in 0u8..3,
            plain in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            at in proptest::num::usize::ANY,
            bit in 0u8..8,
        ) {
            let version = if tls13 { Version::Tls13 } else { Version::Tls12 };
            let mut tx = key(version, 9, kind);
            let mut record = seal(&mut tx, ContentType::ApplicationData, &plain);
            let at = HEADER_LEN + at % (record.len() - HEADER_LEN);
            record[at] ^= 1 << bit;
            let mut rx = key(version, 9, kind);
            proptest::prop_assert!(rx.open(&mut record).is_err());
        }
    }
}

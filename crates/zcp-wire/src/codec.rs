//! Bounded big-endian readers and writers for message bodies.
//!
//! This module owns the primitive encodings (integers, fixed arrays, length-prefixed byte
//! strings) and nothing else. Every length read from the wire is checked against a caller-given
//! bound *before* any allocation, so a hostile peer cannot make a decoder reserve memory it did
//! not already send.

use crate::DecodeError;

/// A cursor over a received message body.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A `u16` length followed by that many bytes, refused when the length exceeds `max`.
    pub(crate) fn bytes(&mut self, max: usize, what: &'static str) -> Result<Vec<u8>, DecodeError> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err(DecodeError::Malformed(format!(
                "{what} is {len} bytes, over the limit of {max}"
            )));
        }
        Ok(self.take(len)?.to_vec())
    }

    /// Like [`Reader::bytes`], for text. Invalid UTF-8 is malformed: every text field a zcp
    /// peer sends comes from a Rust `String`, and a lossy decode could grow a field past its
    /// bound (each bad byte becomes a 3-byte replacement character).
    pub(crate) fn text(&mut self, max: usize, what: &'static str) -> Result<String, DecodeError> {
        let raw = self.bytes(max, what)?;
        String::from_utf8(raw).map_err(|_| DecodeError::Malformed(format!("{what} is not UTF-8")))
    }

    /// Fails unless every byte was consumed: trailing bytes mean a malformed message.
    pub(crate) fn finish(self, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed(format!(
                "{what} has {} trailing bytes",
                self.buf.len()
            )))
        }
    }
}

/// Appends big-endian fields to a message body.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// A `u16` length and the bytes. Callers bound `v` below `u16::MAX` before encoding; a
    /// longer value is cut, which the matching decoder bound would refuse anyway.
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let len = v.len().min(usize::from(u16::MAX));
        self.u16(len as u16);
        self.raw(&v[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut w = Writer::default();
        w.u8(7)
            .u16(513)
            .u32(70000)
            .u64(1 << 40)
            .i64(-5)
            .bytes(b"abc");
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16().unwrap(), 513);
        assert_eq!(r.u32().unwrap(), 70000);
        assert_eq!(r.u64().unwrap(), 1 << 40);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.bytes(3, "name").unwrap(), b"abc");
        r.finish("test").unwrap();

        let mut r = Reader::new(&w.buf[..3]);
        r.u8().unwrap();
        assert_eq!(r.u32(), Err(DecodeError::Truncated { needed: 2 }));

        let mut w = Writer::default();
        w.bytes(b"toolong");
        let err = Reader::new(&w.buf).bytes(3, "name").unwrap_err();
        assert!(matches!(err, DecodeError::Malformed(m) if m.contains("over the limit")));
    }

    #[test]
    fn text_must_be_utf8() {
        let mut w = Writer::default();
        w.bytes(b"ok\xff");
        let err = Reader::new(&w.buf).text(10, "note").unwrap_err();
        assert_eq!(err, DecodeError::Malformed("note is not UTF-8".into()));
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        let r = Reader::new(&[1]);
        assert!(matches!(r.finish("x"), Err(DecodeError::Malformed(_))));
    }
}

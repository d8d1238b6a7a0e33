//! The wire's primitives, read off a byte slice with every length checked: big-endian
//! integers at an offset, and LEB128 varints (Kafka's unsigned varints, the records'
//! zigzag ones, snappy's length preamble). One reader of each, for every stage; what a
//! stage calls a varint too long or cut short, and how it holds a value past 64 bits, is
//! the stage's.

/// The big-endian `i16` at `at`, None past the end.
pub fn be_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The big-endian `i32` at `at`, None past the end.
pub fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The big-endian `u32` at `at`, None past the end.
pub fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The big-endian `i64` at `at`, None past the end.
pub fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The `u16` at `at` in the byte order a capture file declares (`big`), None past the end.
pub fn u16_in(b: &[u8], at: usize, big: bool) -> Option<u16> {
    let v: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(if big {
        u16::from_be_bytes(v)
    } else {
        u16::from_le_bytes(v)
    })
}

/// The `u32` at `at` in the byte order a capture file declares (`big`), None past the end.
pub fn u32_in(b: &[u8], at: usize, big: bool) -> Option<u32> {
    let v: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    })
}

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Varint {
    /// It runs past the end.
    Cut,
    /// It has more than the bytes allowed.
    TooLong,
}

/// The unsigned LEB128 varint at `pos` of `b[..end]`, of at most `max` bytes (at most 18:
/// the value is exact in a `u128`): (value, next position).
pub fn uvarint(b: &[u8], pos: usize, end: usize, max: usize) -> Result<(u128, usize), Varint> {
    let end = end.min(b.len());
    let mut value: u128 = 0;
    for i in 0..max.min(18) {
        let &byte = b
            .get(pos + i)
            .filter(|_| pos + i < end)
            .ok_or(Varint::Cut)?;
        value |= u128::from(byte & 0x7F) << (7 * i);
        if byte < 0x80 {
            return Ok((value, pos + i + 1));
        }
    }
    Err(Varint::TooLong)
}

/// A zigzag-encoded value decoded.
pub fn unzigzag(v: u128) -> i128 {
    let half = (v >> 1) as i128;
    if v & 1 == 1 {
        -half - 1
    } else {
        half
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_their_ends() {
        let b = [0xFF, 0xFE, 0, 0, 0, 1, 2, 3, 4];
        assert_eq!(be_i16(&b, 0), Some(-2));
        assert_eq!(be_i32(&b, 2), Some(1));
        assert_eq!(be_u32(&b, 0), Some(0xFFFE_0000));
        assert_eq!(be_i64(&b, 1), Some(0xFE00_0000_0102_0304_u64 as i64));
        assert_eq!(be_i16(&b, 8), None);
        assert_eq!(be_i32(&b, usize::MAX - 1), None);
        assert_eq!(be_i64(&b, 2), None);
        assert_eq!(u32_in(&b, 2, true), Some(1));
        assert_eq!(u32_in(&b, 2, false), Some(0x0100_0000));
        assert_eq!(u16_in(&b, 0, false), Some(0xFEFF));
        assert_eq!(u16_in(&b, 8, true), None);
    }

    #[test]
    fn varints() {
        assert_eq!(uvarint(&[0x05], 0, 1, 5), Ok((5, 1)));
        assert_eq!(uvarint(&[0x96, 0x01, 9], 0, 3, 5), Ok((150, 2)));
        assert_eq!(uvarint(&[0x96, 0x01], 0, 1, 5), Err(Varint::Cut));
        assert_eq!(uvarint(&[0x80; 6], 0, 6, 5), Err(Varint::TooLong));
        // ten bytes: 70 bits, exact
        let mut ten = [0xFF; 10];
        ten[9] = 0x7F;
        assert_eq!(uvarint(&ten, 0, 10, 10), Ok(((1u128 << 70) - 1, 10)));
        assert_eq!(unzigzag(0), 0);
        assert_eq!(unzigzag(1), -1);
        assert_eq!(unzigzag(2), 1);
        assert_eq!(unzigzag(u128::from(u64::MAX)), i128::from(i64::MIN));
    }
}

//! Property strings: `name 0x01 value 0x02 ...` (spec §3.1, `MessageDecoder.string2messageProperties`).
//!
//! Split on 0x02; split each piece at its first 0x01; drop a piece with no 0x01, an empty
//! name or value, and the `__CRC32#` trailer; a duplicate name keeps its last value, at the
//! place of that last value. The first UNIQ_KEY of a record is kept too: a batch send appends
//! the batch's own properties after each message's.

const CRC32_KEY: &[u8] = b"__CRC32#";
const FIRST_OF: &[u8] = b"UNIQ_KEY";

/// A property's name and value.
pub type Entry<'a> = (&'a [u8], &'a [u8]);

/// The kept entries of one property string, in order, and its first UNIQ_KEY.
#[cfg(test)]
pub fn parse(text: &[u8]) -> (Vec<Entry<'_>>, Option<&[u8]>) {
    let mut kept = Vec::new();
    let first = parse_into(text, &mut kept);
    (kept, first)
}

/// [`parse`] into `kept` (cleared first), so one vector serves every record of a chunk.
pub fn parse_into<'a>(text: &'a [u8], kept: &mut Vec<Entry<'a>>) -> Option<&'a [u8]> {
    kept.clear();
    let mut first = None;
    for piece in memchr::memchr_iter(0x02, text).chain([text.len()]).scan(0, |from, to| {
        let piece = &text[*from..to];
        *from = to + 1;
        Some(piece)
    }) {
        let Some(sep) = memchr::memchr(0x01, piece) else {
            continue; // no separator: the broker's parser drops the piece too
        };
        let (name, value) = (&piece[..sep], &piece[sep + 1..]);
        if name.is_empty() || value.is_empty() || name == CRC32_KEY {
            continue;
        }
        if name == FIRST_OF && first.is_none() {
            first = Some(value);
        }
        // Names per record are few: a linear look-back beats hashing here.
        kept.retain(|(k, _)| *k != name);
        kept.push((name, value));
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_brokers_rules() {
        let (kept, first) = parse(b"a\x011\x02b\x01\x02\x01c\x02a\x012\x02oops\x02__CRC32#\x010123456789\x02k\x01v\x01w");
        assert_eq!(kept, vec![(&b"a"[..], &b"2"[..]), (b"k", b"v\x01w")]);
        assert_eq!(first, None);
    }

    #[test]
    fn the_first_uniq_key_is_kept_beside_the_last() {
        let (kept, first) = parse(b"UNIQ_KEY\x01own\x02UNIQ_KEY\x01batch\x02");
        assert_eq!((kept, first), (vec![(&b"UNIQ_KEY"[..], &b"batch"[..])], Some(&b"own"[..])));
    }
}

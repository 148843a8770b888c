//! Small-string steps run several times per record (names compared, text checked): inlined
//! word-at-a-time versions, because a library call per property name or topic (memcmp,
//! from_utf8) costs more than the comparison itself.

#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap())
}

#[inline(always)]
fn half(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(s[at..at + 4].try_into().unwrap())
}

/// `a == b`, for the short names and values of a record.
#[inline(always)]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n >= 8 {
        let mut i = 0;
        while i + 8 < n {
            if word(a, i) != word(b, i) {
                return false;
            }
            i += 8;
        }
        // The last word overlaps the one before when n is not a multiple of 8.
        return word(a, n - 8) == word(b, n - 8);
    }
    if n >= 4 {
        return half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4);
    }
    a == b
}

/// Whether `s` is valid UTF-8: ASCII is checked a word at a time (property strings and topics
/// nearly always are), anything else by the standard library.
#[inline]
pub fn utf8(s: &[u8]) -> bool {
    let mut high = 0u64;
    let mut i = 0;
    while i + 8 <= s.len() {
        high |= word(s, i);
        i += 8;
    }
    for &b in &s[i..] {
        high |= b as u64;
    }
    high & 0x8080_8080_8080_8080 == 0 || std::str::from_utf8(s).is_ok()
}

/// `a > b` in byte order (as slices compare), inlined: JSON header keys are checked against the
/// one before them once per pair.
#[inline(always)]
pub fn after(a: &[u8], b: &[u8]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x > y;
        }
    }
    a.len() > b.len()
}

/// Where the first `"` in `s` is, when every byte before it is printable ASCII other than a
/// backslash (the strings a simple JSON header holds); None when there is no `"` or a byte
/// before it is not such. One pass finds the quote and checks the bytes before it, 16 at a
/// time on x86_64, where a search for the quote and then a check byte by byte read them twice.
#[inline]
pub fn simple_string(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
                                _mm_set1_epi8};
        // SAFETY: SSE2 is always there on x86_64; each load reads 16 bytes inside `s`.
        unsafe {
            let (quote, slash, del, space) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8),
                                              _mm_set1_epi8(0x7F), _mm_set1_epi8(0x20));
            while i + 16 <= s.len() {
                let v = _mm_loadu_si128(s.as_ptr().add(i) as *const _);
                let q = _mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) as u32;
                // Signed compare: bytes of 0x80 and above are negative, so below 0x20 too.
                let bad = _mm_or_si128(_mm_cmplt_epi8(v, space),
                                       _mm_or_si128(_mm_cmpeq_epi8(v, slash), _mm_cmpeq_epi8(v, del)));
                let b = _mm_movemask_epi8(bad) as u32;
                if q != 0 {
                    let at = q.trailing_zeros();
                    return (b & ((1u32 << at) - 1) == 0).then_some(i + at as usize);
                }
                if b != 0 {
                    return None;
                }
                i += 16;
            }
        }
    }
    for (k, &c) in s[i..].iter().enumerate() {
        if c == b'"' {
            return Some(i + k);
        }
        if !(0x20..=0x7E).contains(&c) || c == b'\\' {
            return None;
        }
    }
    None
}

/// Calls `each(i)` for every `i` where `s[i]` is 0x01 or 0x02 (the property separators), in
/// order: 16 bytes per step on x86_64 (SSE2 is part of the architecture), a byte at a time
/// for the tail and elsewhere. Property strings hold a dozen separators in ~150 bytes, where
/// one memchr call per separator costs more than the scan. Returns whether every byte of `s`
/// is ASCII, seen on the way (so a property string is checked as UTF-8 only when it is not).
#[inline]
pub fn separators(s: &[u8], mut each: impl FnMut(usize)) -> bool {
    let mut i = 0;
    let mut high = 0u8;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
                                _mm_setzero_si128};
        // SAFETY: SSE2 is always there on x86_64; each load reads 16 bytes inside `s`.
        unsafe {
            let (one, two) = (_mm_set1_epi8(1), _mm_set1_epi8(2));
            let mut seen = _mm_setzero_si128();
            while i + 16 <= s.len() {
                let v = _mm_loadu_si128(s.as_ptr().add(i) as *const _);
                seen = _mm_or_si128(seen, v);
                let mut mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, one), _mm_cmpeq_epi8(v, two))) as u32;
                while mask != 0 {
                    each(i + mask.trailing_zeros() as usize);
                    mask &= mask - 1;
                }
                i += 16;
            }
            if _mm_movemask_epi8(seen) != 0 {
                high = 0x80;
            }
        }
    }
    for (k, &b) in s[i..].iter().enumerate() {
        high |= b;
        if b == 1 || b == 2 {
            each(i + k);
        }
    }
    high & 0x80 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_agrees_with_slice_equality() {
        let words: [&[u8]; 9] = [b"", b"a", b"abc", b"abcd", b"abce", b"UNIQ_KEY", b"__CRC32#", b"TIMER_DELAY_SEC",
                                 b"TIMER_DELAY_SEX"];
        for a in words {
            for b in words {
                assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn after_agrees_with_slice_order() {
        let words: [&[u8]; 8] = [b"", b"a", b"ab", b"b", b"##trace_id", b"##client_dispatch_tag", b"bornHost",
                                 b"bornTimestamp"];
        for a in words {
            for b in words {
                assert_eq!(after(a, b), a > b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn simple_string_agrees_with_a_byte_by_byte_check() {
        fn slow(s: &[u8]) -> Option<usize> {
            let at = s.iter().position(|&c| c == b'"')?;
            s[..at].iter().all(|&c| (0x20..=0x7E).contains(&c) && c != b'\\').then_some(at)
        }
        let mut cases: Vec<Vec<u8>> = vec![b"".to_vec(), b"\"".to_vec(), b"abc".to_vec(), b"abc\",rest".to_vec()];
        for bad in [0x00u8, 0x1F, 0x7F, 0x80, 0xC3, 0xFF, b'\\'] {
            for at in [0usize, 5, 15, 16, 17, 31, 40] {
                for quote in [at.saturating_sub(1), at, at + 1, 45] {
                    let mut s = vec![b'x'; 48];
                    s[at] = bad;
                    if quote < s.len() {
                        s[quote] = b'"';
                    }
                    cases.push(s);
                }
            }
        }
        cases.push([b"0123456789abcdef".as_slice(), b"0123456789abcde\"", b"tail"].concat());
        for s in &cases {
            assert_eq!(simple_string(s), slow(s), "{s:?}");
        }
    }

    #[test]
    fn separators_are_found_in_order() {
        let s: Vec<u8> = (0..100u8).map(|i| if i % 7 == 3 { 1 + i % 2 } else { b'a' + i % 26 }).collect();
        let mut got = Vec::new();
        assert!(separators(&s, |i| got.push(i)));
        assert_eq!(got, (0..100).filter(|i| i % 7 == 3).collect::<Vec<_>>());
        for at in [0usize, 15, 16, 40, 99] {
            let mut high = s.clone();
            high[at] = 0xC3;
            assert!(!separators(&high, |_| {}), "a byte of 0x80 or above at {at}");
        }
    }

    #[test]
    fn utf8_agrees_with_the_standard_library() {
        for s in [&b""[..], b"plain ascii text, longer than a word", b"caf\xc3\xa9 au lait", b"bad \xff byte here!",
                  b"\xe2\x82", b"seven b\xc3"] {
            assert_eq!(utf8(s), std::str::from_utf8(s).is_ok(), "{s:?}");
        }
    }
}

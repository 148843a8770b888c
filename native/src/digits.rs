//! Numbers written as decimal text, without the formatting machinery (ids and hosts are
//! written once per record).

/// `v` in decimal, written at the end of `digits`: the slice that holds it.
pub fn format_u64(v: u64, digits: &mut [u8; 20]) -> &[u8] {
    let at = digits.len() - decimal_len(v);
    write_u64(v, &mut digits[at..]);
    &digits[at..]
}

/// How many decimal digits `v` has.
#[inline(always)]
fn decimal_len(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// `v` in decimal into `out`, which is exactly [`decimal_len`] bytes long.
#[inline(always)]
fn write_u64(v: u64, out: &mut [u8]) {
    let (mut n, mut at) = (v, out.len());
    // Two digits per division: ids are 19-20 digits long, and one is written per record.
    while n >= 100 {
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        at -= 2;
        out[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        out[at - 2..at].copy_from_slice(&PAIRS[2 * n as usize..2 * n as usize + 2]);
    } else {
        out[at - 1] = b'0' + n as u8;
    }
}

/// "00" "01" .. "99".
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// `v` in decimal, appended to `out`. Written in place: digits written to a buffer of their own
/// two at a time and then copied were read back in wider loads that waited on those small
/// stores (an nsq message id of 4-7 digits: perf put 7 % of a pass on that copy; in place,
/// `nsq_chunk` is only about 1 % faster, as most of that wait moved to the reads after it).
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    let at = out.len();
    out.resize(at + decimal_len(v), 0);
    write_u64(v, &mut out[at..]);
}

/// Whether `s` is a decimal number (ASCII digits only) that fits a uint64.
pub fn is_u64(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit) && {
        let digits = s.iter().skip_while(|&&c| c == b'0').count();
        digits < 20 || (digits == 20 && std::str::from_utf8(s).ok().and_then(|t| t.parse::<u64>().ok()).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_checks_decimals() {
        let mut out = Vec::new();
        push_u64(&mut out, 0);
        out.push(b' ');
        push_u64(&mut out, u64::MAX);
        for v in [7, 10, 99, 100, 101, 12345, 9_999_999_999_999_999_999, 10_000_000_000_000_000_000] {
            out.push(b' ');
            push_u64(&mut out, v);
        }
        assert_eq!(out, b"0 18446744073709551615 7 10 99 100 101 12345 9999999999999999999 10000000000000000000");
        for v in [0, 9, 10, 11, 99, 100, 999, 1000, 123_456_789, u64::MAX] {
            assert_eq!(format_u64(v, &mut [0u8; 20]), v.to_string().as_bytes());
        }
        for (s, ok) in [(&b"0"[..], true), (b"18446744073709551615", true), (b"18446744073709551616", false),
                        (b"000018446744073709551615", true), (b"", false), (b"12a", false), (b"-1", false)] {
            assert_eq!(is_u64(s), ok, "{}", String::from_utf8_lossy(s));
        }
    }
}

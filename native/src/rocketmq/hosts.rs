//! Host fields as `ip:port` and offset message ids, formatted as the Python reference does.

use std::fmt::Write;

/// `ip:port` (IPv4) or `[v6]:port` for the 8 or 20 bytes of a host field (`rocketmq_layout.format_host`).
pub fn format_host(raw: &[u8], out: &mut String) {
    let n = raw.len() - 4;
    let port = i32::from_be_bytes(raw[n..].try_into().unwrap());
    if n == 4 {
        for (k, &b) in raw[..4].iter().enumerate() {
            decimal(b as i64, out);
            out.push(if k == 3 { ':' } else { '.' });
        }
        decimal(port as i64, out);
        return;
    }
    out.push('[');
    ipv6(&raw[..16], out);
    let _ = write!(out, "]:{port}");
}

/// A number in decimal (ASCII, so the String stays UTF-8).
fn decimal(v: i64, out: &mut String) {
    if v < 0 {
        out.push('-');
    }
    out.extend(crate::digits::format_u64(v.unsigned_abs(), &mut [0u8; 20]).iter().map(|&d| d as char));
}

/// An IPv6 address as Python's `ipaddress` writes it: lower-case groups, the longest run
/// (the first of equals) of two or more zero groups as `::`.
fn ipv6(ip: &[u8], out: &mut String) {
    let groups: Vec<u16> = ip.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    let (mut best, mut best_len, mut run_at, mut run_len) = (0usize, 0usize, 0usize, 0usize);
    for (i, &g) in groups.iter().enumerate() {
        if g == 0 {
            if run_len == 0 {
                run_at = i;
            }
            run_len += 1;
            if run_len > best_len {
                (best, best_len) = (run_at, run_len);
            }
        } else {
            run_len = 0;
        }
    }
    let hex = |gs: &[u16]| gs.iter().map(|g| format!("{g:x}")).collect::<Vec<_>>().join(":");
    if best_len > 1 {
        let _ = write!(out, "{}::{}", hex(&groups[..best]), hex(&groups[best + best_len..]));
    } else {
        out.push_str(&hex(&groups));
    }
}

/// Each byte as two upper-case hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    let digits = b"0123456789ABCDEF";
    let mut t = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [digits[b >> 4], digits[b & 15]];
        b += 1;
    }
    t
};

/// Offset msgId: store host bytes + PHYSICALOFFSET (8 bytes), upper-case hex.
pub fn message_id(store_host: &[u8], physical: &[u8], out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    if store_host.len() == 8 {
        // An IPv4 store host (nearly every broker): 16 bytes, 32 digits, in two SSE2 steps.
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(store_host);
        raw[8..].copy_from_slice(physical);
        crate::buffers::append(out, &hex16(&raw));
        return;
    }
    // Written into a stack buffer, a byte pair at a time, and appended once: a push per
    // character checks the vector's room 32 times per record.
    let mut text = [0u8; 2 * (20 + 8)];
    let mut n = 0;
    for &b in store_host.iter().chain(physical) {
        text[n..n + 2].copy_from_slice(&HEX_PAIRS[b as usize]);
        n += 2;
    }
    crate::buffers::append(out, &text[..n]);
}

/// 16 bytes as 32 upper-case hex digits: each nibble n becomes '0' + n, plus 7 where n > 9
/// ('A' is 7 past '9' + 1).
#[cfg(target_arch = "x86_64")]
fn hex16(raw: &[u8; 16]) -> [u8; 32] {
    use std::arch::x86_64::*;
    let mut out = [0u8; 32];
    // SAFETY: SSE2 is part of x86_64; the loads and stores are unaligned ones within the arrays.
    unsafe {
        let v = _mm_loadu_si128(raw.as_ptr() as *const __m128i);
        let low = _mm_set1_epi8(0x0f);
        let (hi, lo) = (_mm_and_si128(_mm_srli_epi16::<4>(v), low), _mm_and_si128(v, low));
        let digits = |n: __m128i| {
            let letter = _mm_and_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(9)), _mm_set1_epi8(7));
            _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8(b'0' as i8)), letter)
        };
        _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, digits(_mm_unpacklo_epi8(hi, lo)));
        _mm_storeu_si128(out.as_mut_ptr().add(16) as *mut __m128i, digits(_mm_unpackhi_epi8(hi, lo)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(raw: &[u8]) -> String {
        let mut s = String::new();
        format_host(raw, &mut s);
        s
    }

    #[test]
    fn ipv4_and_ipv6_hosts() {
        assert_eq!(host(&[127, 0, 0, 1, 0, 0, 0x2a, 0x9f]), "127.0.0.1:10911");
        assert_eq!(host(&[255, 10, 0, 99, 0x80, 0, 0, 0]), "255.10.0.99:-2147483648"); // the port is an int32
        assert_eq!(host(&[0, 0, 0, 0, 0, 0, 0, 0]), "0.0.0.0:0");
        let mut v6 = vec![0u8; 16];
        v6[15] = 1;
        v6.extend_from_slice(&10911i32.to_be_bytes());
        assert_eq!(host(&v6), "[::1]:10911");
        let ip = [0x24, 0x08, 0x40, 0x04, 0x01, 0x80, 0x81, 0x00, 0x3f, 0xaa, 0x1d, 0xde, 0x2b, 0x3f, 0x89, 0x8a];
        let raw: Vec<u8> = ip.iter().copied().chain(10911i32.to_be_bytes()).collect();
        assert_eq!(host(&raw), "[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911");
        let one_zero: Vec<u8> = [0u8, 1, 0, 0, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7].iter().copied().chain([0, 0, 0, 0]).collect();
        assert_eq!(host(&one_zero), "[1:0:2:3:4:5:6:7]:0");
        // Python 3.11's ipaddress writes an IPv4-mapped address in hex groups, and so do we.
        let mapped: Vec<u8> = [0u8; 10].iter().copied().chain([0xff, 0xff, 1, 2, 3, 4, 0, 0, 0, 7]).collect();
        assert_eq!(host(&mapped), "[::ffff:102:304]:7");
        assert_eq!(host(&[0u8; 20]), "[::]:0");
    }

    #[test]
    fn every_byte_value_in_a_message_id() {
        for first in 0..16u8 {
            let host: Vec<u8> = (0..8).map(|k| first * 16 + k).collect();
            let phys: Vec<u8> = (8..16).map(|k| first * 16 + k).collect();
            let mut out = Vec::new();
            message_id(&host, &phys, &mut out);
            let want: String = host.iter().chain(&phys).map(|b| format!("{b:02X}")).collect();
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
        let mut v6 = Vec::new();
        message_id(&[0xab; 20], &[0x01; 8], &mut v6);
        assert_eq!(v6, [&b"AB".repeat(20)[..], &b"01".repeat(8)].concat());
    }

    #[test]
    fn the_spec_message_id() {
        let mut out = Vec::new();
        message_id(&[100, 81, 0, 250, 0, 0, 0x2a, 0x9f], &311825178782i64.to_be_bytes(), &mut out);
        assert_eq!(out, b"645100FA00002A9F000000489A3AA09E");
    }
}

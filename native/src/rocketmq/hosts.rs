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

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Offset msgId: store host bytes + PHYSICALOFFSET (8 bytes), upper-case hex.
pub fn message_id(store_host: &[u8], physical: &[u8], out: &mut Vec<u8>) {
    // Written into a stack buffer and appended once: a push per character checks the
    // vector's room 32 times per record.
    let mut text = [0u8; 2 * (20 + 8)];
    let mut n = 0;
    for &b in store_host.iter().chain(physical) {
        text[n] = HEX[(b >> 4) as usize];
        text[n + 1] = HEX[(b & 15) as usize];
        n += 2;
    }
    out.extend_from_slice(&text[..n]);
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
    fn the_spec_message_id() {
        let mut out = Vec::new();
        message_id(&[100, 81, 0, 250, 0, 0, 0x2a, 0x9f], &311825178782i64.to_be_bytes(), &mut out);
        assert_eq!(out, b"645100FA00002A9F000000489A3AA09E");
    }
}

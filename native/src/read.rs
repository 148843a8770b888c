//! Big-endian integer reads at byte positions (bounds are checked by the callers' framing).

#[inline]
pub fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

#[inline]
pub fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

#[inline]
pub fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// How many records ahead the walks prefetch.
pub const AHEAD: usize = 4;

/// Ask the CPU to start loading `buf[at]` (a record a few steps ahead): the walks over a chunk
/// jump from record to record, and each jump is otherwise a cache miss waited for.
#[inline(always)]
pub fn prefetch(buf: &[u8], at: i64) {
    #[cfg(target_arch = "x86_64")]
    if at >= 0 && (at as usize) < buf.len() {
        // SAFETY: the address is inside `buf`; a prefetch only hints the cache, it never faults.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(buf.as_ptr().add(at as usize) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}

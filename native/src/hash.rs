//! A small hasher for the short keys (header and property names) counted per chunk.

use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: property names are short and few; SipHash would cost more than the parse.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        self.0 = h;
    }
}

pub type FnvBuild = BuildHasherDefault<Fnv>;

//! youzan/nsq extended disk-queue segments (docs: shared/specs/nsq-ext-segment.md).

pub mod chunk;
pub mod fields;
pub mod framing;
pub mod headers;
pub mod json;

//! Apache RocketMQ CommitLog files (docs: shared/specs/rocketmq-commitlog.md).

pub mod batch;
pub mod columns;
pub mod framing;
pub mod hosts;
pub mod inflate;
pub mod layout;
pub mod properties;
pub mod records;

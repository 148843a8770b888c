//! Apache RocketMQ CommitLog files (docs: shared/specs/rocketmq-commitlog.md).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}

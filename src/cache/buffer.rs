//! The one allocation every cache makes, checked and fallible.

use crate::error::{Error, Result};

/// A zeroed f32 buffer of `dims` (multiplied, checked), or [`Error::OutOfMemory`] naming
/// `what` when the size overflows or the allocator says no: every cache layout allocates
/// through here, so the largest reservation fails with a message instead of an abort.
pub(crate) fn zeroed_buffer(what: &'static str, dims: &[usize]) -> Result<Vec<f32>> {
    let too_big = || Error::OutOfMemory {
        what: what.to_string(),
        bytes: dims.iter().fold(size_of::<f32>() as u128, |a, &d| {
            a.saturating_mul(d as u128)
        }),
    };
    let len = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|len| len.checked_mul(size_of::<f32>()).is_some())
        .ok_or_else(too_big)?;
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).map_err(|_| too_big())?;
    buffer.resize(len, 0.0);
    Ok(buffer)
}

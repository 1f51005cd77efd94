//! Weights on 2 MiB pages: the memory roof a decode step actually meets.
//!
//! Decode streams every weight once per token, 540 MB for SmolLM2 in f32. On 4 KiB
//! pages that is 130,000 pages, each needing a translation the TLB does not hold (it
//! holds a few thousand); a strip of output columns reads its rows from a new page at
//! every step of `k`, so the page walks, not DRAM, set the pace. On 2 MiB pages the
//! same bytes are 270 pages. Linux backs an anonymous mapping with huge pages when
//! asked (`madvise(MADV_HUGEPAGE)`, transparent huge pages in "madvise" mode, the
//! default of most distributions) before the memory is first touched.
//!
//! [`rehome`] copies a matrix into memory so advised: the same values in the same
//! order, so every result is bitwise the one on 4 KiB pages (a copy moves addresses, not values);
//! only the time changes (`kvlab bench`, chapter roofline.md).

use ndarray::{s, Array1, Array2};

/// The huge page size of x86-64 Linux.
pub const HUGE_PAGE: usize = 2 << 20;

/// `w`, copied into memory advised for 2 MiB pages. Matrices under one huge page
/// (norms, small projections) are cloned as they are: there is no page to gain.
/// Where the advice is refused (another OS, THP disabled) the copy is an ordinary
/// one: huge pages change speed, never values.
pub fn rehome<E: Clone>(w: &Array2<E>) -> Array2<E> {
    let elem = std::mem::size_of::<E>().max(1);
    let len = w.len();
    if len.saturating_mul(elem) < HUGE_PAGE {
        return w.as_standard_layout().into_owned();
    }
    // Room for the data to start on a 2 MiB boundary, wherever the allocator put it.
    let pad = HUGE_PAGE.div_ceil(elem);
    let Some(capacity) = len.checked_add(pad) else {
        return w.as_standard_layout().into_owned();
    };
    let mut buf: Vec<E> = Vec::new();
    if buf.try_reserve_exact(capacity).is_err() {
        return w.as_standard_layout().into_owned();
    }
    let base = buf.as_ptr() as usize;
    let offset = (base.next_multiple_of(HUGE_PAGE) - base).div_ceil(elem);
    advise_huge(base + offset * elem, len * elem);
    // Touching the memory after the advice is what makes the kernel fault in huge pages.
    buf.extend(std::iter::repeat_n(w[[0, 0]].clone(), offset));
    buf.extend(w.iter().cloned());
    Array1::from_vec(buf)
        .slice_move(s![offset..])
        .into_shape_with_order(w.dim())
        .expect("offset + len elements were written")
}

/// Asks the kernel to back `[start, start + bytes)` (rounded inwards to whole huge pages)
/// with huge pages. Advice only: the result is not checked, because a refusal changes
/// nothing but speed.
#[cfg(target_os = "linux")]
fn advise_huge(start: usize, bytes: usize) {
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end <= first {
        return;
    }
    // SAFETY: `[first, end)` lies inside one live allocation this process owns (the
    // caller's reserved, not yet written `Vec`). MADV_HUGEPAGE only changes how later page
    // faults are served; it never moves, frees or changes the contents of memory, so no
    // Rust reference is affected.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_start: usize, _bytes: usize) {}

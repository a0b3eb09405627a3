//! Page-aligned data buffers: where every byte a test moves is copied from or to.
//!
//! A stream's data crosses the kernel boundary once per `read` or `write`, and that copy
//! (`copy_to_user`, `rep movsb` on x86-64) runs at about half speed when the user buffer
//! does not start on a cache line. A `Vec<u8>` of 128 KiB from the system allocator starts
//! 16 bytes past a page boundary (glibc's chunk header) or anywhere on a 16-byte grid, so
//! flowlab's TCP receiver ran at half iperf3's speed on some machines, and at either
//! speed from one test to the next in a long-running server (docs/lab-notes/performance.md, "Issue
//! 14: the cause"). iperf3 maps its buffer (page-aligned); so does this.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment of every data buffer: a page, which is also a cache line's multiple.
pub const ALIGN: usize = 4096;

/// A zeroed, page-aligned byte buffer of fixed length.
pub struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a PageBuf owns its allocation exclusively, as a Vec<u8> does; `&PageBuf` only
// gives `&[u8]`.
unsafe impl Send for PageBuf {}
// SAFETY: as above: shared references allow reads only.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// `len` zero bytes starting on a page boundary.
    pub fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout's size is at least 1 (`layout`), as `alloc_zeroed` requires.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        PageBuf { ptr, len }
    }

    /// `len` bytes starting on a page boundary, byte `i` set to `fill(i)`.
    pub fn filled(len: usize, fill: impl Fn(usize) -> u8) -> Self {
        let mut buf = Self::zeroed(len);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = fill(i);
        }
        buf
    }

    fn layout(len: usize) -> Layout {
        // A zero-sized allocation is not allowed; one byte stands in for it.
        Layout::from_size_align(len.max(1), ALIGN).expect("a buffer length below isize::MAX")
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this very layout and is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` initialised (zeroed, then written) bytes that this
        // PageBuf owns for its whole life.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({} bytes at {:p})", self.len, self.ptr)
    }
}

/// The payload every write carries, page-aligned ([`PageBuf`]: the kernel's copy runs at
/// full speed). Its content does not matter; a fixed, non-zero pattern of 251 bytes keeps
/// compression anywhere on the path from flattering the numbers. `repeating` (iperf3's
/// `--repeating-payload`) is iperf3's pattern instead: the digits 0 to 9 over and over.
pub(crate) fn payload(len: usize, repeating: bool) -> PageBuf {
    if repeating {
        PageBuf::filled(len, |i| b'0' + (i % 10) as u8)
    } else {
        PageBuf::filled(len, |i| (i.wrapping_mul(131) % 251) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_page_and_hold_what_is_written() {
        // Sizes around glibc's mmap threshold (128 KiB), where a Vec starts 16 bytes past
        // a page, and after a large free has raised it (a Vec then comes from the heap).
        let big = vec![0u8; 1 << 21];
        drop(big);
        for len in [0, 1, 1460, 128 * 1024, 128 * 1024 + 1, 1 << 20] {
            let mut b = PageBuf::zeroed(len);
            assert_eq!(
                b.as_ptr() as usize % ALIGN,
                0,
                "{len} bytes at {:p}",
                b.as_ptr()
            );
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
        let f = PageBuf::filled(300, |i| (i % 251) as u8);
        assert_eq!(f[250], 250);
        assert_eq!(f[251], 0);
    }
}

//! Store files mapped into memory, guarded against being cut under the process.
//!
//! The sealed tier's rows and the symbol runs are read where they lie in their
//! mapped store files (a year's rows and serial numbers would otherwise be copied
//! into the heap). A mapped file that another process cuts short turns a read of
//! its lost pages into SIGBUS, which would end stq with every answer it was
//! serving. So each map is registered here, and a SIGBUS handler, installed with
//! the first map, puts a page of zeros where a registered map lost its page and
//! marks the map [`faulted`](Mapped::faulted): the read goes on, reads zeros, and
//! its reader, which checks the mark after reading, returns the
//! [`StorageFault`](super::fault::StorageFault) a damaged read returns (the bytes
//! were read whole and checked when the file was opened, so a map that did not
//! fault holds what was checked, or fails a row's or a string's own hash).
//!
//! A SIGBUS at any other address is not ours: the handler puts the previous
//! handler back and returns, so the faulting access runs again under it and ends
//! the process as it would have without stq's handler.
//!
//! The handler reads only atomics of a table that never moves (no lock, no
//! allocation), and calls `mmap` and `sigaction` (system calls, safe in a signal
//! handler on Linux). No map goes unguarded: beyond the table's room a file is
//! not mapped, and its reader copies what it needs into the heap.

use std::fs::File;
use std::ops::Deref;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use parking_lot::Mutex;

/// How many maps can be guarded at once: a store's files of a year of 100
/// stations are some thousands.
const ROOM: usize = 1 << 16;

/// A guarded map's place in the table: the bytes it spans, and whether one of its
/// pages was lost (zero when free).
struct Region {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

static REGIONS: [Region; ROOM] = [const {
    Region {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    }
}; ROOM];

/// How many of the table's places were ever used: the handler looks no further.
static USED: AtomicUsize = AtomicUsize::new(0);

/// Places freed by dropped maps, to use again.
static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The handler SIGBUS had before stq's, put back for a fault that is not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

static PAGE: AtomicUsize = AtomicUsize::new(0);

/// How many lost pages were replaced by zeros, for tests.
static REPLACED: AtomicUsize = AtomicUsize::new(0);

/// A store file mapped whole and guarded.
#[derive(Debug)]
pub(crate) struct Mapped {
    map: memmap2::Mmap,
    place: usize,
}

impl Mapped {
    /// `file` mapped whole.
    ///
    /// # Errors
    /// The map's error, or no room left to guard another map.
    pub(crate) fn new(file: &File) -> std::io::Result<Mapped> {
        install();
        let place = place().ok_or_else(|| std::io::Error::other("no room to guard a map"))?;
        // SAFETY: a store file is written whole under a temporary name and never
        // written again once named. Another process that changed it changes what
        // is read, which its readers check (a row's or a string's hash); one that
        // cut it would end the process with SIGBUS, which this module's handler
        // answers for the registered range.
        let map = unsafe { memmap2::Mmap::map(file) }.inspect_err(|_| FREE.lock().push(place))?;
        let region = &REGIONS[place];
        let start = map.as_ptr() as usize;
        region.faulted.store(false, Ordering::SeqCst);
        region.end.store(start + map.len(), Ordering::SeqCst);
        region.start.store(start, Ordering::SeqCst);
        Ok(Mapped { map, place })
    }

    /// Whether a page of the file was lost since it was mapped (the file was cut):
    /// what was read from it may be zeros. A reader asks after reading.
    pub(crate) fn faulted(&self) -> bool {
        // The handler ran on this thread, between the reads before this and the
        // load below: keep the compiler from moving them across.
        compiler_fence(Ordering::SeqCst);
        REGIONS[self.place].faulted.load(Ordering::SeqCst)
    }
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // The place is freed before the map is unmapped (its field is dropped
        // after this), so that no place names a range the process may map again.
        let region = &REGIONS[self.place];
        region.start.store(0, Ordering::SeqCst);
        region.end.store(0, Ordering::SeqCst);
        FREE.lock().push(self.place);
    }
}

/// A free place in the table, if there is room.
fn place() -> Option<usize> {
    if let Some(place) = FREE.lock().pop() {
        return Some(place);
    }
    let place = USED.fetch_add(1, Ordering::SeqCst);
    if place < ROOM {
        return Some(place);
    }
    USED.fetch_sub(1, Ordering::SeqCst);
    None
}

/// Installs the SIGBUS handler, once.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        PAGE.store(usize::try_from(page).unwrap_or(4096), Ordering::SeqCst);
        // SAFETY: a zeroed sigaction is a valid one (no flags, an empty mask), and
        // the handler is a function of the signature SA_SIGINFO asks for.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                let _ = PREVIOUS.set(previous);
            }
        }
    });
}

/// The SIGBUS handler: a lost page of a registered map is replaced by zeros and
/// the map marked; any other fault goes back to the previous handler.
extern "C" fn on_sigbus(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    let used = USED.load(Ordering::SeqCst).min(ROOM);
    let page = PAGE.load(Ordering::SeqCst);
    for region in &REGIONS[..used] {
        let start = region.start.load(Ordering::SeqCst);
        if start == 0 || address < start || address >= region.end.load(Ordering::SeqCst) {
            continue;
        }
        let first = address - address % page;
        // SAFETY: the page is inside a live read-only map of this process (its
        // reader is faulting on it), which MAP_FIXED replaces with zeros; the map's
        // own unmapping later unmaps it with the rest.
        let zeros = unsafe {
            libc::mmap(
                first as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zeros != libc::MAP_FAILED {
            region.faulted.store(true, Ordering::SeqCst);
            REPLACED.fetch_add(1, Ordering::SeqCst);
            return;
        }
        break;
    }
    if let Some(previous) = PREVIOUS.get() {
        // SAFETY: the action the kernel gave back when stq's was installed.
        unsafe { libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut()) };
    }
}

/// How many lost pages the handler has replaced since the process started.
#[cfg(test)]
pub(crate) fn replaced_pages() -> usize {
    REPLACED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn file_of(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(bytes).unwrap();
        file.flush().unwrap();
        file
    }

    /// Issue 51: a mapped file cut under the process is no SIGBUS: its lost pages
    /// read as zeros and its map says it faulted, while a map of another file,
    /// whole, reads what it holds and did not fault.
    #[test]
    fn issue_51_a_mapped_file_cut_under_the_process_reads_zeros_and_says_so() {
        let bytes: Vec<u8> = (0..5 * 4096).map(|at| (at % 251) as u8 + 1).collect();
        let (cut, whole) = (file_of(&bytes), file_of(&bytes));
        let cut_map = Mapped::new(cut.as_file()).unwrap();
        let whole_map = Mapped::new(whole.as_file()).unwrap();
        assert_eq!(&cut_map[..], &bytes[..]);
        assert!(!cut_map.faulted());

        cut.as_file().set_len(4096).unwrap();
        let replaced = replaced_pages();
        assert_eq!(
            &cut_map[..4096],
            &bytes[..4096],
            "the page still in the file"
        );
        assert_eq!(cut_map[3 * 4096 + 7], 0, "a lost page reads as zeros");
        assert!(cut_map.faulted());
        assert!(replaced_pages() > replaced);
        assert!(cut_map[4096..].iter().all(|byte| *byte == 0));

        assert_eq!(&whole_map[..], &bytes[..]);
        assert!(!whole_map.faulted());
    }

    /// Issue 51: a place freed by a dropped map is used again, its mark cleared.
    #[test]
    fn issue_51_a_place_used_again_starts_unfaulted() {
        let bytes = vec![7u8; 3 * 4096];
        let file = file_of(&bytes);
        let map = Mapped::new(file.as_file()).unwrap();
        file.as_file().set_len(0).unwrap();
        assert_eq!(map[2 * 4096], 0);
        assert!(map.faulted());
        drop(map);
        let again = file_of(&bytes);
        let map = Mapped::new(again.as_file()).unwrap();
        assert_eq!(&map[..], &bytes[..]);
        assert!(!map.faulted());
    }
}

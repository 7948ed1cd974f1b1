//! `--watch` (docs/api.md section 8): a reload on its own when a snapshot file or
//! the tokens file changes. Changes are seen by the operating system's change
//! notification (inotify, through notify), or, with `--watch-poll` or on a network
//! or user-space file system (NFS, CIFS/SMB, FUSE, told by statfs(2)'s magic
//! number), by a look at every file's size, modification time and inode every so
//! often ([`Look::watch`]), as a reload itself tells a changed file from an unchanged
//! one. Notification misses what other hosts write to a shared directory; a look
//! sees it.
//!
//! Either way, what was seen goes to one thread, which gathers it for [`BATCH`]
//! after the first change and asks for a reload that looks only at the paths seen
//! changed. It never waits for a pause, because a test floor's writers never pause.
//!
//! Not notify's `PollWatcher`: notify 8's compares modification times in whole
//! seconds and only whether they grew, so a line appended within the second of the
//! last look, or a file replaced by an older copy (`rsync -t`, `cp -p`), is never
//! seen; comparing contents instead reads every file at every look.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher as _};
use stq_core::data::{Catalog, Look};

use super::reload::ReloadTrigger;

/// How long the watch gathers changes after the first one before it asks for a
/// reload: a write fires several events, and an append and the line end after it
/// are best read together. Not a wait for quiet: more events during it do not
/// extend it. A reload that reads a file half-way through a copy is safe: a line
/// without its end is pending, and a half-written gzip or OpenHTF file is held
/// back (or, under `skip`, skipped) until the next change reads it whole.
const BATCH: Duration = Duration::from_millis(100);

/// How often the watch looks at a snapshot directory on a network file system
/// when `--watch-poll` does not say: often enough for section 8's 2 s.
const NETWORK_POLL: Duration = Duration::from_secs(1);

/// A running watch, which ends when dropped.
pub struct Watch {
    /// The operating system's notification, when the watch relies on it.
    _notify: Option<notify::RecommendedWatcher>,
    /// Set when dropped: the looks end.
    stop: Arc<AtomicBool>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reloads when anything changes under `snapshots` or the tokens file changes, as
/// the operating system tells, or as a look every `poll` finds (every second on a
/// network file system without `poll`); the first look compares each file with
/// how `catalog`, the generation served, read it. The watch lasts as long as the
/// returned [`Watch`] lives.
pub fn reload_on_change(
    trigger: ReloadTrigger,
    snapshots: &Path,
    tokens: &Path,
    poll: Option<Duration>,
    catalog: &Catalog,
) -> notify::Result<Watch> {
    let snapshots = snapshots.canonicalize()?;
    let tokens = tokens.canonicalize()?;
    let (seen, changes) = std::sync::mpsc::channel::<Seen>();
    let stop = Arc::new(AtomicBool::new(false));
    let poll = poll.or_else(|| {
        let name = remote_file_system_of(&snapshots)?;
        tracing::info!(
            "the snapshot directory {} is on {name}, where the system's change notification \
             misses what other hosts write: looking at every file every {} (--watch-poll)",
            snapshots.display(),
            humantime::format_duration(NETWORK_POLL)
        );
        Some(NETWORK_POLL)
    });
    let notify = match poll {
        Some(every) => {
            let looks = Looks {
                seen: seen.clone(),
                look: Look::watch(catalog, &snapshots, &tokens),
                every,
                stop: Arc::clone(&stop),
            };
            std::thread::Builder::new()
                .name("stq-watch-poll".into())
                .spawn(move || looks.run())?;
            tracing::info!(
                "watching {} by a look at every file every {}",
                snapshots.display(),
                humantime::format_duration(every)
            );
            None
        }
        None => Some(notify_watch(seen, &snapshots, &tokens)?),
    };
    std::thread::Builder::new()
        .name("stq-watch".into())
        .spawn(move || gather(&changes, &trigger))?;
    Ok(Watch {
        _notify: notify,
        stop,
    })
}

/// The operating system's notification of changes under `snapshots` and to the
/// tokens file, sent to `seen`.
fn notify_watch(
    seen: Sender<Seen>,
    snapshots: &Path,
    tokens: &Path,
) -> notify::Result<notify::RecommendedWatcher> {
    let (within, tokens_file) = (snapshots.to_path_buf(), tokens.to_path_buf());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let event = match event {
            Ok(event) if event.kind.is_access() => return,
            Ok(event) if !event.need_rescan() => event,
            // Events were lost: only a look at every file knows what changed.
            _ => {
                let _ = seen.send(Seen::Everything);
                return;
            }
        };
        for path in &event.paths {
            if let Ok(relative) = path.strip_prefix(&within) {
                let relative: Vec<_> = relative
                    .components()
                    .map(|component| component.as_os_str().to_string_lossy())
                    .collect();
                let _ = seen.send(Seen::Snapshot(relative.join("/")));
            } else if *path == tokens_file {
                let _ = seen.send(Seen::Tokens);
            }
        }
    })?;
    watcher.watch(snapshots, RecursiveMode::Recursive)?;
    // Editors replace a file by renaming another over it: watch its directory.
    if let Some(directory) = tokens
        .parent()
        .filter(|directory| !directory.starts_with(snapshots))
    {
        watcher.watch(directory, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Gathers what was seen for [`BATCH`] after each first change, then asks for a
/// reload that looks where changes were seen; until every sender is gone.
fn gather(changes: &std::sync::mpsc::Receiver<Seen>, trigger: &ReloadTrigger) {
    while let Ok(first) = changes.recv() {
        let mut everything = false;
        let mut paths = BTreeSet::new();
        let mut note = |seen: Seen| match seen {
            Seen::Everything => everything = true,
            Seen::Snapshot(path) => {
                paths.insert(path);
            }
            Seen::Tokens => {}
        };
        note(first);
        let deadline = Instant::now() + BATCH;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match changes.recv_timeout(left) {
                Ok(seen) => note(seen),
                Err(_) => break,
            }
        }
        tracing::debug!("files changed: reloading the snapshot and the tokens");
        trigger.request_quietly(everything, paths);
    }
}

/// A change the watch saw.
enum Seen {
    /// At this path under the snapshot directory, relative to it and `/`-separated.
    Snapshot(String),
    /// To the tokens file, which every reload reads anyway.
    Tokens,
    /// Somewhere: events were lost.
    Everything,
}

/// `--watch-poll`: a look at every snapshot file's stamp, and the tokens file's,
/// every `every`, each compared with the look before.
struct Looks<L> {
    seen: Sender<Seen>,
    /// A look at every file: what changed since the look before.
    look: L,
    every: Duration,
    stop: Arc<AtomicBool>,
}

impl<L: FnMut() -> Option<Look>> Looks<L> {
    /// Looks every `every` (from the start of one look to the next's, so a long
    /// look does not stretch the period) until stopped or nobody listens.
    fn run(mut self) {
        let mut next = Instant::now() + self.every;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            next = (next + self.every).max(Instant::now());
            let seen: Vec<Seen> = match (self.look)() {
                None => Vec::new(),
                Some(Look::Everything) => vec![Seen::Everything],
                Some(Look::Paths(paths)) if paths.is_empty() => vec![Seen::Tokens],
                Some(Look::Paths(paths)) => paths.into_iter().map(Seen::Snapshot).collect(),
            };
            for change in seen {
                if self.seen.send(change).is_err() {
                    return;
                }
            }
        }
    }
}

/// The network or user-space file system `directory` is on, if it is one.
#[cfg(target_os = "linux")]
fn remote_file_system_of(directory: &Path) -> Option<&'static str> {
    let stats = rustix::fs::statfs(directory).ok()?;
    // The magic numbers are 32 bits; `f_type` is as wide as a C long.
    #[allow(clippy::unnecessary_cast)]
    remote_file_system(stats.f_type as u32)
}

#[cfg(not(target_os = "linux"))]
fn remote_file_system_of(_directory: &Path) -> Option<&'static str> {
    None
}

/// The name of the file system whose statfs(2) magic number is `magic`, if it is
/// one where the operating system's change notification misses writes: those of
/// other hosts (NFS, CIFS/SMB) or of a user-space server (FUSE).
fn remote_file_system(magic: u32) -> Option<&'static str> {
    match magic {
        0x6969 => Some("NFS"),
        0x517B => Some("SMB"),
        0xFF53_4D42 => Some("CIFS"),
        0xFE53_4D42 => Some("SMB2"),
        0x6573_5546 => Some("FUSE"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34: the file systems where notification misses writes are told by
    /// their magic numbers (linux/magic.h), and local ones are not taken for them.
    #[test]
    fn issue_34_network_file_systems_are_told_by_their_magic_numbers() {
        for (magic, name) in [
            (0x6969, "NFS"),
            (0x517B, "SMB"),
            (0xFF53_4D42, "CIFS"),
            (0xFE53_4D42, "SMB2"),
            (0x6573_5546, "FUSE"),
        ] {
            assert_eq!(remote_file_system(magic), Some(name), "{magic:#x}");
        }
        // ext4, tmpfs, btrfs, xfs, overlayfs, zfs, proc.
        for magic in [
            0xEF53,
            0x0102_1994,
            0x9123_683E,
            0x5846_5342,
            0x794C_7630,
            0x2FC1_2FC1,
            0x9FA0,
        ] {
            assert_eq!(remote_file_system(magic), None, "{magic:#x}");
        }
    }

    /// A local directory is not taken for a network one: the watch relies on the
    /// system's notification there.
    #[test]
    fn issue_34_a_local_directory_is_not_remote() {
        let directory = tempfile::tempdir().unwrap();
        assert_eq!(remote_file_system_of(directory.path()), None);
    }
}

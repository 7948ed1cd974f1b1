//! What systemd is told about the service (`Type=notify`, sd_notify(3)): ready once
//! the snapshot has loaded and the listeners are bound, reloading while a reload
//! asked for by SIGHUP runs, stopping once a stop begins.
//!
//! Each message goes to the socket named by `NOTIFY_SOCKET`; without that variable
//! (not started by systemd) nothing is sent. A message that cannot be sent is
//! logged and otherwise ignored: serving matters more than telling.

use sd_notify::NotifyState;

/// The snapshot has loaded and the listeners are bound (or a reload has ended);
/// `status` is shown by `systemctl status`.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload asked for by SIGHUP (`systemctl reload`) starts; [`ready`] ends it.
pub fn reloading() {
    // systemd 253 and later want the clock with RELOADING=1; older ones ignore it.
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// A stop has begun: no new connections, the requests in flight finish.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

fn send(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!("cannot tell systemd the service's state: {error}");
    }
}

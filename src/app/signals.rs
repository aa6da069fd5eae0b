//! The signals the commands answer: SIGINT and SIGTERM stop, SIGHUP reloads.
//!
//! Handlers are registered when [`Signals::install`] is called, before a
//! command binds anything or says it has started. A signal sent from then
//! on is acted on, never given its default action: for SIGHUP and SIGTERM
//! that would end the process at once, so a reload sent just after start
//! (by a supervisor, or a script that waited for the start line) would kill
//! it instead.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// What a signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// SIGINT or SIGTERM: stop gracefully.
    Shutdown,
    /// SIGHUP: read the config files again.
    Reload,
}

/// Registered handlers for SIGINT, SIGTERM and SIGHUP.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

/// A signal handler that could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("listening for {name}")]
pub struct SignalError {
    name: &'static str,
    #[source]
    source: std::io::Error,
}

impl Signals {
    /// Registers the handlers now. Needs a running Tokio runtime.
    pub fn install() -> Result<Self, SignalError> {
        let on = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|source| SignalError { name, source })
        };
        Ok(Self {
            interrupt: on(SignalKind::interrupt(), "SIGINT")?,
            terminate: on(SignalKind::terminate(), "SIGTERM")?,
            hangup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Waits for the next signal.
    pub async fn recv(&mut self) -> Received {
        tokio::select! {
            _ = self.interrupt.recv() => Received::Shutdown,
            _ = self.terminate.recv() => Received::Shutdown,
            _ = self.hangup.recv() => Received::Reload,
        }
    }

    /// Waits for SIGINT or SIGTERM, for commands that have nothing to
    /// reload (a SIGHUP is logged and otherwise ignored).
    pub async fn shutdown(mut self) {
        while self.recv().await == Received::Reload {
            tracing::info!("SIGHUP ignored: this command has no config to reload");
        }
    }
}

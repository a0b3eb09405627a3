//! Why a test ended early: every step of a test (handshake, streams, exchange) says it
//! with one error.

use flowlab_proto::State;

use super::refusal::Refusal;
use crate::control::ControlError;

/// Why a test ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TestError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("{0}")]
    Busy(String),
    #[error("authentication failed: {0}")]
    Auth(flowlab_proto::auth::AuthError),
    #[error("handshake (--handshake-timeout): {0}")]
    Handshake(ControlError),
    #[error("waiting for data streams: {0}")]
    Streams(String),
    #[error("the client ended the test (CLIENT_TERMINATE)")]
    ClientTerminated,
    #[error("{0}; test terminated")]
    Limit(String),
    #[error("unexpected control message {0:?}")]
    Unexpected(State),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl TestError {
    /// Whether the test ended before its parameters arrived complete.
    pub(crate) fn before_parameters(&self) -> bool {
        matches!(self, TestError::Handshake(_))
    }
}

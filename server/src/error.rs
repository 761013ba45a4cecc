//! The server's error below the HTTP edge: what kind of refusal it is (which names its API
//! error code), a message and an optional hint. Only `http` turns a kind into a status code
//! and the error into `{"error": {"code", "message", "hint"}}`.

use csivol_api::{ErrorBody, ErrorCode};

/// What went wrong, as far as the caller is concerned: each kind has one API error code
/// (which tells a client whether a retry can help) and, at the HTTP edge, one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request does not parse (a body, a query, a header).
    Malformed,
    /// The request parses but can never succeed as sent.
    Invalid,
    /// No usable token.
    Unauthenticated,
    /// A token that may not do this.
    Forbidden,
    NotFound,
    Conflict,
    /// Held by a claim whose node was lost.
    Blocked,
    /// The node lies outside the volume's accessible topology.
    Topology,
    /// An action ran and did not succeed (a fence method that did not confirm the node off).
    Failed,
    Unavailable,
    Internal,
}

impl Kind {
    pub fn code(self) -> ErrorCode {
        match self {
            Self::Malformed | Self::Invalid => ErrorCode::Invalid,
            Self::Unauthenticated | Self::Forbidden => ErrorCode::Unauthorized,
            Self::NotFound => ErrorCode::NotFound,
            Self::Conflict => ErrorCode::Conflict,
            Self::Blocked => ErrorCode::Blocked,
            Self::Topology => ErrorCode::Topology,
            Self::Failed => ErrorCode::Failed,
            Self::Unavailable => ErrorCode::Unavailable,
            Self::Internal => ErrorCode::Internal,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: Kind,
    pub message: String,
    pub hint: Option<String>,
}

impl ApiError {
    fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            hint: None,
        }
    }

    /// The API error code.
    pub fn code(&self) -> ErrorCode {
        self.kind.code()
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// A request that can never succeed as sent.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, message)
    }

    /// Free text a client sent with a control character in it, or larger than its limit
    /// ([`csivol_api::FreeText`]).
    pub fn text(e: csivol_api::TextError) -> Self {
        use csivol_api::TextError;
        use csivol_api::limits::Limit;
        let hint = match &e {
            TextError::Control { .. } => "remove the control character (an ESC, `\\r`, a tab, a newline...) from that field and send it again".to_owned(),
            TextError::TooLarge { limit, .. } | TextError::TooMany { limit, .. } => match limit {
                Limit::Csi => "shorten it: a plugin is not bound to take more (the CSI spec's Size Limits); keep large data where the plugin reads it, and pass its name".to_owned(),
                Limit::Csivol => "shorten it, or split it".to_owned(),
                Limit::Server(setting) => format!(
                    "shorten it: this server's limit is `{setting}` under [limits] in its config file, at most csivol's default"
                ),
            },
        };
        Self::invalid(e.to_string()).with_hint(hint)
    }

    /// A number a client sent outside its kind's range ([`csivol_api::limits`]).
    pub fn out_of_range(e: csivol_api::limits::OutOfRange) -> Self {
        Self::invalid(e.to_string())
    }

    /// Input that does not parse.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Kind::Malformed, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(Kind::Unauthenticated, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, message)
    }

    pub fn blocked(message: impl Into<String>) -> Self {
        Self::new(Kind::Blocked, message)
    }

    /// The node lies outside the volume's accessible topology: no retry of the same
    /// request can succeed.
    pub fn topology(message: impl Into<String>) -> Self {
        Self::new(Kind::Topology, message)
    }

    /// An action ran and did not succeed (a fence method that did not confirm the node off).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(Kind::Failed, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Kind::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, message)
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code(),
            message: self.message.clone(),
            hint: self.hint.clone(),
        }
    }
}

impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        Self::internal(format!("stored JSON is unreadable: {e}"))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

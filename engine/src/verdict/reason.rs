//! Why a record was quarantined or dropped. Each reason is a stable, counted metric label.

/// A CloudEvents context attribute the verdict reads from a record's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attr {
    SpecVersion,
    Id,
    Source,
    Type,
    Time,
    SchemaVersion,
    ResourceType,
    EventType,
    TenantId,
    Subject,
    DataContentType,
    DataSchema,
    SystemEvent,
    TraceParent,
    TraceState,
}

impl Attr {
    /// Every attribute, in slot order.
    pub const ALL: [Attr; 15] = [
        Attr::SpecVersion,
        Attr::Id,
        Attr::Source,
        Attr::Type,
        Attr::Time,
        Attr::SchemaVersion,
        Attr::ResourceType,
        Attr::EventType,
        Attr::TenantId,
        Attr::Subject,
        Attr::DataContentType,
        Attr::DataSchema,
        Attr::SystemEvent,
        Attr::TraceParent,
        Attr::TraceState,
    ];

    /// The attribute's name without prefix, as CloudEvents spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Attr::SpecVersion => "specversion",
            Attr::Id => "id",
            Attr::Source => "source",
            Attr::Type => "type",
            Attr::Time => "time",
            Attr::SchemaVersion => "schemaversion",
            Attr::ResourceType => "resourcetype",
            Attr::EventType => "eventtype",
            Attr::TenantId => "tenantid",
            Attr::Subject => "subject",
            Attr::DataContentType => "datacontenttype",
            Attr::DataSchema => "dataschema",
            Attr::SystemEvent => "systemevent",
            Attr::TraceParent => "traceparent",
            Attr::TraceState => "tracestate",
        }
    }

    /// W3C trace context travels unprefixed; every other attribute carries `ce-` (or `ce_`).
    pub const fn prefixed(self) -> bool {
        !matches!(self, Attr::TraceParent | Attr::TraceState)
    }

    pub(crate) const fn slot(self) -> usize {
        self as usize
    }
}

/// Why a record is malformed (R-IN-3, R-IN-4). Replaying it can never make it valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuarantineReason {
    /// The record value is larger than the configured limit.
    OversizedValue,
    /// A context attribute's value is larger than the configured limit.
    OversizedHeader(Attr),
    /// A context attribute is not valid UTF-8.
    NonUtf8Header(Attr),
    /// A context attribute holds a control character (U+0000–U+001F, U+007F–U+009F), which
    /// CloudEvents disallows in a string and which no HTTP header, AMQP or SQS attribute of a
    /// delivery could carry. The trace context is the exception: it is left out instead.
    ControlCharacter(Attr),
    /// A required context attribute is absent (or has a null value).
    Missing(Attr),
    /// `ce-specversion` is not `1.0`.
    UnsupportedSpecVersion,
    /// `ce-id` is not a UUID.
    InvalidId,
    /// `ce-id` is a UUID but not version 7 with the RFC 9562 variant.
    IdNotUuidV7,
    /// `ce-source` is not one segment of `[a-z0-9][a-z0-9_-]*`.
    InvalidSource,
    /// `ce-source` differs from the `<source>` of the topic (or ingest path) it arrived on.
    SourceTopicMismatch,
    /// `ce-type` is not `studio.lerian.<source>.<resourcetype>.<eventtype>`.
    InvalidType,
    /// The `<source>` inside `ce-type` differs from `ce-source`.
    TypeSourceMismatch,
    /// `ce-resourcetype` / `ce-eventtype` differ from the segments of `ce-type`.
    TypeSegmentsMismatch,
    /// `ce-time` is not RFC 3339.
    InvalidTime,
    /// `ce-schemaversion` has no leading integer (the schema major).
    InvalidSchemaVersion,
    /// `ce-tenantid` is not a tenant id: 1 to 128 ASCII letters, digits, `-`, `_`, `.` or `:`,
    /// beginning with a letter or digit (no paths, no control characters).
    InvalidTenant,
    /// `ce-id` is a UUIDv7 whose time is not plausible: before 2020 or from 2100 on (a zero or
    /// garbage timestamp, which would also sort wrongly wherever ids are ordered by time).
    IdTimeImplausible,
}

impl QuarantineReason {
    /// The metric label and the `reason` stored with the quarantine record.
    pub fn code(self) -> &'static str {
        use QuarantineReason as R;
        match self {
            R::OversizedValue => "oversized_value",
            R::OversizedHeader(_) => "oversized_header",
            R::NonUtf8Header(_) => "non_utf8_header",
            R::ControlCharacter(_) => "control_character",
            R::Missing(Attr::TenantId) => "missing_tenant",
            R::Missing(_) => "missing_attribute",
            R::UnsupportedSpecVersion => "unsupported_specversion",
            R::InvalidId => "invalid_id",
            R::IdNotUuidV7 => "id_not_uuidv7",
            R::InvalidSource => "invalid_source",
            R::SourceTopicMismatch => "source_topic_mismatch",
            R::InvalidType => "invalid_type",
            R::TypeSourceMismatch => "type_source_mismatch",
            R::TypeSegmentsMismatch => "type_segments_mismatch",
            R::InvalidTime => "invalid_time",
            R::InvalidSchemaVersion => "invalid_schemaversion",
            R::InvalidTenant => "invalid_tenant",
            R::IdTimeImplausible => "id_time_implausible",
        }
    }

    /// The attribute concerned, when there is one (stored as the reason's detail).
    pub fn attr(self) -> Option<Attr> {
        match self {
            Self::OversizedHeader(a)
            | Self::NonUtf8Header(a)
            | Self::ControlCharacter(a)
            | Self::Missing(a) => Some(a),
            _ => None,
        }
    }

    /// A human-readable line for operators and for the HTTP ingest's 400 body.
    pub fn describe(self) -> String {
        match self.attr() {
            Some(a) if a.prefixed() => format!("{}: ce-{}", self.code(), a.name()),
            Some(a) => format!("{}: {}", self.code(), a.name()),
            None => self.code().to_owned(),
        }
    }

    /// Every reason code, for metric registration (a counter exists even while zero).
    pub const CODES: [&'static str; 18] = [
        "oversized_value",
        "oversized_header",
        "non_utf8_header",
        "control_character",
        "missing_tenant",
        "missing_attribute",
        "unsupported_specversion",
        "invalid_id",
        "id_not_uuidv7",
        "invalid_source",
        "source_topic_mismatch",
        "invalid_type",
        "type_source_mismatch",
        "type_segments_mismatch",
        "invalid_time",
        "invalid_schemaversion",
        "invalid_tenant",
        "id_time_implausible",
    ];

    /// Index of this reason's code in [`Self::CODES`].
    pub fn code_index(self) -> usize {
        let code = self.code();
        Self::CODES.iter().position(|c| *c == code).unwrap_or(0)
    }
}

/// Why a well-formed record is skipped without being stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `ce-systemevent: true`: platform-internal, never delivered (R-IN-4).
    SystemEvent,
}

//! Table tests for every verdict rule (R-IN-2 … R-IN-5), with header sets as the Lerian producer
//! writes them and as a careless producer might; and a property test that no input panics.

use proptest::prelude::*;

use super::*;

const ID: &str = "0192f5a4-6c1e-7b3a-9d2e-5f1a2b3c4d5e";

/// The record of SPEC appendix A, as the producer library writes it.
fn lerian() -> Vec<(String, Option<Vec<u8>>)> {
    [
        ("ce-specversion", "1.0"),
        ("ce-id", ID),
        ("ce-source", "lender"),
        ("ce-type", "studio.lerian.lender.loan_application.approved"),
        ("ce-time", "2026-11-29T20:17:42.123456789Z"),
        ("ce-schemaversion", "1.0.0"),
        ("ce-resourcetype", "loan_application"),
        ("ce-eventtype", "approved"),
        ("ce-tenantid", "t-7f3e"),
        ("ce-subject", "loan-123"),
        ("ce-datacontenttype", "application/json"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Some(v.as_bytes().to_vec())))
    .collect()
}

fn with(
    mut h: Vec<(String, Option<Vec<u8>>)>,
    key: &str,
    value: Option<&[u8]>,
) -> Vec<(String, Option<Vec<u8>>)> {
    h.retain(|(k, _)| k != key);
    h.push((key.to_owned(), value.map(<[u8]>::to_vec)));
    h
}

fn without(mut h: Vec<(String, Option<Vec<u8>>)>, key: &str) -> Vec<(String, Option<Vec<u8>>)> {
    h.retain(|(k, _)| k != key);
    h
}

fn judge_on(source: &str, h: &[(String, Option<Vec<u8>>)], value_len: usize) -> Verdict<'static> {
    // Leak for the table's convenience: the verdict borrows from the headers.
    let h: &'static [(String, Option<Vec<u8>>)] = Box::leak(h.to_vec().into_boxed_slice());
    judge(
        source,
        h.iter().map(|(k, v)| (k.as_bytes(), v.as_deref())),
        value_len,
        &VerdictLimits::default(),
    )
}

fn reason(h: &[(String, Option<Vec<u8>>)]) -> Option<QuarantineReason> {
    match judge_on("lender", h, 10) {
        Verdict::Quarantine(r) => Some(r),
        _ => None,
    }
}

#[test]
fn r_in_3_the_producer_librarys_record_is_accepted_with_every_field() {
    let Verdict::Accept(ev) = judge_on("lender", &lerian(), 100) else {
        panic!("accepted")
    };
    assert_eq!(ev.id.to_string(), ID);
    assert_eq!(ev.tenant, "t-7f3e");
    assert_eq!(ev.source, "lender");
    assert_eq!(ev.key(), "loan_application.approved");
    assert_eq!(ev.schema_major, 1);
    assert_eq!(ev.subject, Some("loan-123"));
    assert_eq!(ev.data_content_type, Some("application/json"));
    assert!(ev.traceparent.is_some());
    assert_eq!(ev.time_unix_nanos % 1_000_000_000, 123_456_789);
}

#[test]
fn r_in_4_system_event_is_dropped_even_without_tenant() {
    let h = with(
        without(lerian(), "ce-tenantid"),
        "ce-systemevent",
        Some(b"true"),
    );
    assert_eq!(
        judge_on("lender", &h, 10),
        Verdict::Drop(DropReason::SystemEvent)
    );
    let h = with(lerian(), "ce-systemevent", Some(b"TRUE"));
    assert_eq!(
        judge_on("lender", &h, 10),
        Verdict::Drop(DropReason::SystemEvent)
    );
}

#[test]
fn r_in_4_systemevent_false_is_an_ordinary_event() {
    let h = with(lerian(), "ce-systemevent", Some(b"false"));
    assert!(matches!(judge_on("lender", &h, 10), Verdict::Accept(_)));
}

#[test]
fn r_in_3_each_missing_required_attribute_is_quarantined_by_name() {
    let required = [
        ("ce-specversion", Attr::SpecVersion),
        ("ce-id", Attr::Id),
        ("ce-source", Attr::Source),
        ("ce-type", Attr::Type),
        ("ce-time", Attr::Time),
        ("ce-schemaversion", Attr::SchemaVersion),
        ("ce-resourcetype", Attr::ResourceType),
        ("ce-eventtype", Attr::EventType),
        ("ce-tenantid", Attr::TenantId),
    ];
    for (key, attr) in required {
        assert_eq!(
            reason(&without(lerian(), key)),
            Some(QuarantineReason::Missing(attr)),
            "{key}"
        );
        // A null header value counts as absent.
        assert_eq!(
            reason(&with(lerian(), key, None)),
            Some(QuarantineReason::Missing(attr)),
            "{key} null"
        );
    }
}

#[test]
fn r_in_4_missing_or_blank_tenant_is_quarantined_as_missing_tenant() {
    for blank in [&b""[..], b"   "] {
        let r = reason(&with(lerian(), "ce-tenantid", Some(blank))).expect("quarantined");
        assert_eq!(r.code(), "missing_tenant");
    }
    assert_eq!(
        reason(&with(lerian(), "ce-tenantid", Some(b"t\n1"))),
        Some(QuarantineReason::ControlCharacter(Attr::TenantId))
    );
}

/// CloudEvents disallows the control characters in a string attribute, and none could travel
/// in a delivery's headers: such a record is malformed, quarantined at ingest rather than
/// stored and then refused at its first attempt.
#[test]
fn r_in_4_a_control_character_in_an_attribute_is_quarantined_with_its_attribute() {
    let cases: [(&str, &[u8]); 6] = [
        ("ce-schemaversion", b"1.0\r\nx-injected: 1"),
        ("ce-datacontenttype", b"application/json\x00"),
        ("ce-subject", b"loan\t123"),
        ("ce-dataschema", b"https://x/\x7f"),
        ("ce-subject", "loan\u{85}".as_bytes()),
        ("ce-specversion", b"1.0\n"),
    ];
    for (key, value) in cases {
        let r = reason(&with(lerian(), key, Some(value))).expect("quarantined");
        assert_eq!(r.code(), "control_character", "{key}");
        assert_eq!(r.attr().map(|a| a.name()), Some(&key[3..]), "{key}");
    }
    // Other characters outside ASCII are no control characters.
    let h = with(lerian(), "ce-subject", Some("empréstimo-€".as_bytes()));
    assert!(matches!(judge_on("lender", &h, 1), Verdict::Accept(_)));
}

/// W3C Trace Context discards a trace context it cannot parse; the event goes on without it.
#[test]
fn r_tr_5_a_trace_context_with_a_control_character_is_left_out_and_the_event_accepted() {
    let h = with(lerian(), "traceparent", Some(b"00-4bf9\n-01"));
    let h = with(h, "tracestate", Some(b"k=v\x01"));
    let Verdict::Accept(event) = judge_on("lender", &h, 1) else {
        panic!("accepted");
    };
    assert_eq!((event.traceparent, event.tracestate), (None, None));
}

#[test]
fn r_in_3_tenant_ids_follow_their_grammar() {
    let long = "t".repeat(129);
    for bad in ["../x", "t 1", " t1", "-t", "t/1", long.as_str()] {
        assert_eq!(
            reason(&with(lerian(), "ce-tenantid", Some(bad.as_bytes()))),
            Some(QuarantineReason::InvalidTenant),
            "{bad}"
        );
    }
    for good in [
        "t-1",
        "tenant_2",
        "org.acme:prod",
        "0192f5a4-6c1e-7b3a-9d2e-5f1a2b3c4d5e",
    ] {
        assert_eq!(
            reason(&with(lerian(), "ce-tenantid", Some(good.as_bytes()))),
            None,
            "{good}"
        );
    }
}

#[test]
fn r_in_3_a_uuidv7_with_an_implausible_time_is_quarantined() {
    // Version 7 and the RFC variant, with a zero timestamp and one in the year 10889.
    for id in [
        "00000000-0000-7000-8000-000000000001",
        "ffffffff-ffff-7000-8000-000000000001",
    ] {
        assert_eq!(
            reason(&with(lerian(), "ce-id", Some(id.as_bytes()))),
            Some(QuarantineReason::IdTimeImplausible),
            "{id}"
        );
    }
}

#[test]
fn r_in_3_bad_values_are_quarantined_with_their_reason() {
    use QuarantineReason as R;
    let cases: &[(&str, &[u8], R)] = &[
        ("ce-specversion", b"0.3", R::UnsupportedSpecVersion),
        ("ce-id", b"not-a-uuid", R::InvalidId),
        (
            "ce-id",
            b"6ba7b810-9dad-41d1-80b4-00c04fd430c8",
            R::IdNotUuidV7,
        ),
        (
            "ce-id",
            b"0192f5a4-6c1e-7b3a-cd2e-5f1a2b3c4d5e",
            R::IdNotUuidV7,
        ),
        ("ce-source", b"Lender", R::InvalidSource),
        ("ce-source", b"len.der", R::InvalidSource),
        ("ce-source", b"_lender", R::InvalidSource),
        ("ce-source", b"tracer", R::SourceTopicMismatch),
        ("ce-type", b"loan_application.approved", R::InvalidType),
        (
            "ce-type",
            b"studio.lerian.lender.loan_application",
            R::InvalidType,
        ),
        (
            "ce-type",
            b"studio.lerian.lender.loan_application.approved.v2",
            R::InvalidType,
        ),
        ("ce-type", b"studio.lerian.lender..approved", R::InvalidType),
        (
            "ce-type",
            b"studio.lerian.tracer.loan_application.approved",
            R::TypeSourceMismatch,
        ),
        (
            "ce-type",
            b"studio.lerian.lender.loan_application.rejected",
            R::TypeSegmentsMismatch,
        ),
        ("ce-resourcetype", b"account", R::TypeSegmentsMismatch),
        ("ce-time", b"yesterday", R::InvalidTime),
        ("ce-time", b"2026-11-29 20:17:42", R::InvalidTime),
        ("ce-schemaversion", b"one", R::InvalidSchemaVersion),
        ("ce-schemaversion", b"1x", R::InvalidSchemaVersion),
    ];
    for (key, value, want) in cases {
        assert_eq!(
            reason(&with(lerian(), key, Some(value))),
            Some(*want),
            "{key}={}",
            String::from_utf8_lossy(value)
        );
    }
}

#[test]
fn r_in_3_schema_major_is_the_leading_integer() {
    assert_eq!(schema_major("1.0.0"), Some(1));
    assert_eq!(schema_major("2"), Some(2));
    assert_eq!(schema_major("v3.1"), Some(3));
    assert_eq!(schema_major("10-beta"), Some(10));
    assert_eq!(schema_major(""), None);
    assert_eq!(schema_major("x1"), None);
    let Verdict::Accept(ev) = judge_on(
        "lender",
        &with(lerian(), "ce-schemaversion", Some(b"2.1.0")),
        1,
    ) else {
        panic!("accepted")
    };
    assert_eq!(ev.schema_major, 2);
}

#[test]
fn r_in_2_kafka_binding_underscore_prefix_is_accepted() {
    let h: Vec<_> = lerian()
        .into_iter()
        .map(|(k, v)| (k.replacen("ce-", "ce_", 1), v))
        .collect();
    assert!(matches!(judge_on("lender", &h, 1), Verdict::Accept(_)));
}

#[test]
fn r_in_2_dash_prefix_wins_over_underscore_in_either_order() {
    let dash_first = with(lerian(), "ce_tenantid", Some(b"t-under"));
    let Verdict::Accept(ev) = judge_on("lender", &dash_first, 1) else {
        panic!("accepted")
    };
    assert_eq!(ev.tenant, "t-7f3e");
    let mut under_last = without(lerian(), "ce-tenantid");
    under_last.push(("ce-tenantid".into(), Some(b"t-dash".to_vec())));
    under_last.push(("ce_tenantid".into(), Some(b"t-under".to_vec())));
    let Verdict::Accept(ev) = judge_on("lender", &under_last, 1) else {
        panic!("accepted")
    };
    assert_eq!(ev.tenant, "t-dash");
}

#[test]
fn r_in_2_repeated_header_last_occurrence_wins() {
    let mut h = lerian();
    h.push(("ce-tenantid".into(), Some(b"t-second".to_vec())));
    let Verdict::Accept(ev) = judge_on("lender", &h, 1) else {
        panic!("accepted")
    };
    assert_eq!(ev.tenant, "t-second");
    // A later null value erases an earlier good one.
    let mut h = lerian();
    h.push(("ce-tenantid".into(), None));
    assert_eq!(
        reason(&h).map(QuarantineReason::code),
        Some("missing_tenant")
    );
}

#[test]
fn r_in_2_attribute_names_match_without_regard_to_case() {
    let h: Vec<_> = lerian()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_uppercase(), v))
        .collect();
    assert!(matches!(judge_on("lender", &h, 1), Verdict::Accept(_)));
}

#[test]
fn bad_input_non_utf8_and_oversized_headers_are_quarantined() {
    assert_eq!(
        reason(&with(lerian(), "ce-tenantid", Some(&[0xff, 0xfe]))),
        Some(QuarantineReason::NonUtf8Header(Attr::TenantId))
    );
    assert_eq!(
        reason(&with(lerian(), "ce-subject", Some(&[0xc3]))),
        Some(QuarantineReason::NonUtf8Header(Attr::Subject))
    );
    let big = vec![b'a'; 5000];
    assert_eq!(
        reason(&with(lerian(), "ce-tenantid", Some(&big))),
        Some(QuarantineReason::OversizedHeader(Attr::TenantId))
    );
    // Unknown headers, even huge or binary ones, are ignored.
    let h = with(lerian(), "x-junk", Some(&[0xff; 100_000]));
    assert!(matches!(judge_on("lender", &h, 1), Verdict::Accept(_)));
}

#[test]
fn bad_input_oversized_value_is_quarantined() {
    let limit = VerdictLimits::default().max_value_bytes;
    assert!(matches!(
        judge_on("lender", &lerian(), limit),
        Verdict::Accept(_)
    ));
    assert_eq!(
        judge_on("lender", &lerian(), limit + 1),
        Verdict::Quarantine(QuarantineReason::OversizedValue)
    );
}

#[test]
fn r_in_1_topic_grammar() {
    assert_eq!(topic_source("lerian.streaming.lender"), Some("lender"));
    assert_eq!(topic_source("lerian.streaming.mid-az_2"), Some("mid-az_2"));
    for t in [
        "lerian.streaming.lender.dlq",
        "lerian.streaming.lender.commands",
        "lerian.streaming.",
        "lerian.streaming.Lender",
        "other.lender",
    ] {
        assert_eq!(topic_source(t), None, "{t}");
    }
    assert_eq!(
        dlq_topic_source("lerian.streaming.lender.dlq"),
        Some("lender")
    );
    assert_eq!(dlq_topic_source("lerian.streaming.lender"), None);
}

#[test]
fn r_in_4_counters_count_each_verdict_and_reason() {
    let c = VerdictCounters::default();
    c.count(&judge_on("lender", &lerian(), 1));
    c.count(&judge_on(
        "lender",
        &with(lerian(), "ce-systemevent", Some(b"true")),
        1,
    ));
    c.count(&judge_on("lender", &without(lerian(), "ce-tenantid"), 1));
    c.count(&judge_on("lender", &with(lerian(), "ce-id", Some(b"x")), 1));
    c.count_duplicates(2);
    let s = c.snapshot();
    assert_eq!(
        (
            s.accepted,
            s.dropped_system,
            s.deduplicated,
            s.quarantined_total()
        ),
        (1, 1, 2, 2)
    );
    assert_eq!(s.quarantined_for("missing_tenant"), 1);
    assert_eq!(s.quarantined_for("invalid_id"), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// No input panics the parser: arbitrary header keys and bytes, mixed with real attributes.
    #[test]
    fn bad_input_no_header_set_panics_the_verdict(
        raw in proptest::collection::vec(
            (prop_oneof![
                Just(b"ce-id".to_vec()), Just(b"ce_type".to_vec()), Just(b"ce-tenantid".to_vec()),
                Just(b"ce-time".to_vec()), Just(b"ce-systemevent".to_vec()), Just(b"CE-SOURCE".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..12),
            ],
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64))),
            0..24),
        source in "[a-z]{0,6}",
        value_len in 0usize..(2 << 20),
    ) {
        let mut headers = lerian();
        headers.truncate(raw.len() % (headers.len() + 1));
        let mut owned: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            headers.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect();
        owned.extend(raw);
        let v = judge(&source, owned.iter().map(|(k, v)| (k.as_slice(), v.as_deref())), value_len, &VerdictLimits::default());
        if let Verdict::Quarantine(r) = v {
            prop_assert!(!r.describe().is_empty());
        }
    }
}

/// R-IN-5: the tenant is the validated `ce-tenantid` and nothing else — not another header
/// that names a tenant, and no allow-list: a tenant never seen before is accepted as it is.
#[test]
fn r_in_5_the_tenant_comes_only_from_ce_tenantid_with_no_allow_list() {
    let h = with(
        with(lerian(), "ce-tenantid", Some(b"brand-new-tenant-42")),
        "x-tenant-id",
        Some(b"someone-else"),
    );
    let Verdict::Accept(ev) = judge_on("lender", &h, 10) else {
        panic!("accepted")
    };
    assert_eq!(ev.tenant, "brand-new-tenant-42");
}

use futures::executor::block_on;

use super::scripted::Written;
use super::*;

fn wire(answer: &[u8], step: usize) -> (Wire, Written) {
    let stream = Scripted::answering(answer, step);
    let written = stream.written.clone();
    (Wire::new(Box::new(stream)), written)
}

fn exchange(wire: &mut Wire, body: &[u8], cap: usize) -> Result<(Answer, bool), Failed> {
    let fields = format!("host: example.test\r\ncontent-length: {}\r\n", body.len());
    let request = Request {
        target: "/hooks/in?x=1",
        fields: &fields.as_bytes(),
        body,
    };
    block_on(wire.exchange(&request, cap))
}

/// Each answer read whole at every read size, one byte at a time included.
fn answered(answer: &[u8], cap: usize) -> (u16, Vec<u8>, bool) {
    let mut seen = None;
    for step in [1, 3, 7, 8192] {
        let (mut w, _) = wire(answer, step);
        let (a, keep) = exchange(&mut w, b"{}", cap).expect("answered");
        let this = (a.status, a.body, keep);
        if let Some(before) = &seen {
            assert_eq!(&this, before, "read {step} bytes at a time");
        }
        seen = Some(this);
    }
    seen.expect("read")
}

#[test]
fn r_di_5_the_request_is_written_as_one_post_with_its_fields_and_body() {
    let (mut w, written) = wire(b"HTTP/1.1 204 No Content\r\n\r\n", 8192);
    exchange(&mut w, b"{\"amount\":1}", 1024).expect("answered");
    assert_eq!(
        String::from_utf8_lossy(&written.borrow()),
        "POST /hooks/in?x=1 HTTP/1.1\r\nhost: example.test\r\ncontent-length: 12\r\n\r\n{\"amount\":1}"
    );
    let big = vec![b'x'; COPIED_BODY + 1];
    let (mut w, written) = wire(b"HTTP/1.1 204 No Content\r\n\r\n", 8192);
    exchange(&mut w, &big, 1024).expect("answered");
    assert!(
        written.borrow().ends_with(&big),
        "a large body follows its head"
    );
}

#[test]
fn r_di_13_an_answer_framed_by_length_keeps_its_connection_for_the_next_request() {
    let two = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Oops\r\ncontent-length: 4\r\n\r\nfail";
    for step in [1, 5, 8192] {
        let (mut w, _) = wire(two, step);
        let (first, keep) = exchange(&mut w, b"{}", 1024).expect("first");
        // Bytes after an answer close the connection, unless they arrive only later.
        if step == 8192 {
            assert!(!keep, "the second answer came before its request");
            continue;
        }
        assert_eq!(
            (first.status, first.body.as_slice(), keep),
            (200, &b"ok"[..], true)
        );
        let (second, keep) = exchange(&mut w, b"{}", 1024).expect("second");
        assert_eq!(
            (second.status, second.body.as_slice(), keep),
            (500, &b"fail"[..], true)
        );
    }
}

#[test]
fn r_di_13_a_chunked_answer_is_read_through_its_extensions_and_trailers() {
    let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A\r\n abcdefghijklmnopqrstuvwxy\r\n0\r\nx-trailer: 1\r\n\r\n";
    let (status, body, keep) = answered(answer, 1024);
    assert_eq!(status, 200);
    assert_eq!(body, b"hello abcdefghijklmnopqrstuvwxy");
    assert!(keep);
}

#[test]
fn r_di_13_interim_answers_are_passed_over_and_204_has_no_body() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(answered(answer, 1024), (204, Vec::new(), true));
}

#[test]
fn r_di_13_an_answer_without_framing_or_asking_to_close_closes_its_connection() {
    let cases: [(&[u8], u16, &[u8]); 5] = [
        (b"HTTP/1.1 200 OK\r\n\r\nuntil the end", 200, b"until the end"),
        (b"HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nzz", 200, b"zz"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, b"ok"),
    ];
    for (answer, status, body) in cases {
        let what = String::from_utf8_lossy(answer);
        assert_eq!(
            answered(answer, 1024),
            (status, body.to_vec(), false),
            "{what}"
        );
    }
    let kept = b"HTTP/1.0 200 OK\r\nconnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok";
    assert_eq!(answered(kept, 1024), (200, b"ok".to_vec(), true));
}

#[test]
fn r_di_13_a_body_past_the_cap_is_kept_to_the_cap_and_its_connection_closed() {
    let mut long = b"HTTP/1.1 500 Oops\r\ncontent-length: 100\r\n\r\n".to_vec();
    long.extend_from_slice(&[b'x'; 100]);
    let chunked = b"HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n8\r\nxxxxxxxx\r\n8\r\nxxxxxxxx\r\n0\r\n\r\n";
    for answer in [&long[..], chunked] {
        // Read in pieces, the rest is not waited for: the connection closes.
        let (mut w, _) = wire(answer, 1);
        let (a, keep) = exchange(&mut w, b"{}", 10).expect("answered");
        assert_eq!((a.status, a.body, keep), (500, vec![b'x'; 10], false));
        // Already read whole, it is taken whole and the connection stays.
        let (mut w, _) = wire(answer, 8192);
        let (a, keep) = exchange(&mut w, b"{}", 10).expect("answered");
        assert_eq!((a.status, a.body, keep), (500, vec![b'x'; 10], true));
    }
    // A body exactly the cap's size is whole.
    assert_eq!(answered(&long, 100), (500, vec![b'x'; 100], true));
}

#[test]
fn r_di_13_a_malformed_answer_or_a_close_is_an_error_that_says_which() {
    for answer in [
        &b"SMTP ready\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n",
    ] {
        let (mut w, _) = wire(answer, 8192);
        let failed = exchange(&mut w, b"{}", 1024).expect_err("malformed");
        assert!(matches!(failed, Failed::Malformed(_)), "{failed:?}");
        assert!(!failed.closed_under());
    }
    for answer in [
        &b""[..],
        b"HTTP/1.1 200 OK\r\ncontent-le",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nok",
    ] {
        let (mut w, _) = wire(answer, 8192);
        let failed = exchange(&mut w, b"{}", 1024).expect_err("closed");
        assert!(failed.closed_under(), "{failed:?}");
    }
    let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', MOST_HEAD + 1));
    let (mut w, _) = wire(&huge, 8192);
    assert!(matches!(
        exchange(&mut w, b"{}", 1024),
        Err(Failed::Malformed(_))
    ));
}

//! The SQS endpoint (SPEC §4): a queue URL `https://sqs.<region>.amazonaws.com/<account>/<name>`
//! (or the legacy `https://<region>.queue.amazonaws.com/…`), or the queue's ARN
//! `arn:aws:sqs:<region>:<account>:<name>`. Only the region, account and name are kept: the hub
//! calls the region's SQS endpoint (or the operator's override), never a host a tenant names.

use crate::sink::aws::{valid_account, valid_region};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SqsTarget {
    pub region: String,
    pub account: String,
    pub queue: String,
}

impl SqsTarget {
    pub fn parse(endpoint: &str) -> Result<Self, String> {
        let (region, account, queue) = if let Some(arn) = endpoint.strip_prefix("arn:") {
            let parts: Vec<&str> = arn.split(':').collect();
            match parts.as_slice() {
                [partition, "sqs", region, account, queue] if partition.starts_with("aws") => (
                    (*region).to_owned(),
                    (*account).to_owned(),
                    (*queue).to_owned(),
                ),
                _ => return Err("expected arn:aws:sqs:<region>:<account>:<queue>".into()),
            }
        } else {
            let url = url::Url::parse(endpoint)
                .map_err(|_| "endpoint is a queue URL or a queue ARN".to_owned())?;
            if url.scheme() != "https"
                || url.port().is_some()
                || url.query().is_some()
                || url.fragment().is_some()
                || !url.username().is_empty()
                || url.password().is_some()
            {
                return Err(
                    "a queue URL is https://sqs.<region>.amazonaws.com/<account>/<queue>".into(),
                );
            }
            let host = url.host_str().unwrap_or_default();
            let region = host
                .strip_prefix("sqs.")
                .and_then(|h| h.strip_suffix(".amazonaws.com"))
                .or_else(|| host.strip_suffix(".queue.amazonaws.com"))
                .ok_or("a queue URL's host is sqs.<region>.amazonaws.com")?;
            let path: Vec<&str> = url.path().trim_start_matches('/').split('/').collect();
            match path.as_slice() {
                [account, queue] => (
                    region.to_owned(),
                    (*account).to_owned(),
                    (*queue).to_owned(),
                ),
                _ => return Err("a queue URL's path is /<account>/<queue>".into()),
            }
        };
        if !valid_region(&region) {
            return Err(format!("{region:?} is not an AWS region"));
        }
        if !valid_account(&account) {
            return Err("the account is 12 digits".into());
        }
        if !valid_queue_name(&queue) {
            return Err(
                "a queue name is 1 to 80 letters, digits, '-' or '_' (with .fifo for FIFO queues)"
                    .into(),
            );
        }
        Ok(Self {
            region,
            account,
            queue,
        })
    }

    pub fn fifo(&self) -> bool {
        self.queue.ends_with(".fifo")
    }

    /// The queue URL the call names: on the operator's endpoint when set, else the region's.
    pub fn queue_url(&self, endpoint_override: Option<&str>) -> String {
        match endpoint_override {
            Some(base) => format!(
                "{}/{}/{}",
                base.trim_end_matches('/'),
                self.account,
                self.queue
            ),
            None => format!(
                "https://sqs.{}.amazonaws.com/{}/{}",
                self.region, self.account, self.queue
            ),
        }
    }
}

fn valid_queue_name(name: &str) -> bool {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    (1..=80).contains(&name.len())
        && !stem.is_empty()
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sk_2_sqs_endpoints_name_a_region_an_account_and_a_queue_never_a_host() {
        let url = SqsTarget::parse("https://sqs.us-east-1.amazonaws.com/123456789012/orders")
            .expect("url");
        let arn = SqsTarget::parse("arn:aws:sqs:us-east-1:123456789012:orders").expect("arn");
        assert_eq!(url, arn);
        assert_eq!(
            url.queue_url(None),
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
        );
        assert_eq!(
            url.queue_url(Some("http://127.0.0.1:5055/")),
            "http://127.0.0.1:5055/123456789012/orders"
        );
        assert!(
            SqsTarget::parse("https://eu-west-1.queue.amazonaws.com/123456789012/q.fifo")
                .expect("legacy")
                .fifo()
        );
        for bad in [
            "https://10.0.0.1/123456789012/q",
            "https://sqs.us-east-1.amazonaws.com.evil.com/123456789012/q",
            "http://sqs.us-east-1.amazonaws.com/123456789012/q",
            "https://sqs.us-east-1.amazonaws.com:8443/123456789012/q",
            "https://sqs.us-east-1.amazonaws.com/123456789012/q?endpoint=https://10.0.0.1",
            "https://sqs.127.0.0.1.amazonaws.com/123456789012/q",
            "https://sqs.us-east-1.amazonaws.com/12345/q",
            "https://sqs.us-east-1.amazonaws.com/123456789012/a/b",
            "arn:aws:sqs:us-east-1:123456789012:bad name",
            "arn:aws:events:us-east-1:123456789012:q",
            "q",
        ] {
            assert!(SqsTarget::parse(bad).is_err(), "{bad} must be refused");
        }
    }
}

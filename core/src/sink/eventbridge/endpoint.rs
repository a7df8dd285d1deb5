//! The EventBridge endpoint (SPEC §4): the event bus ARN
//! `arn:aws:events:<region>:<account>:event-bus/<name>`. The hub calls the region's EventBridge
//! endpoint (or the operator's override), never a host a tenant names.

use crate::sink::aws::{valid_account, valid_region};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BusTarget {
    pub region: String,
    pub arn: String,
}

impl BusTarget {
    pub fn parse(endpoint: &str) -> Result<Self, String> {
        let shape = "expected arn:aws:events:<region>:<account>:event-bus/<name>";
        let parts: Vec<&str> = endpoint.splitn(6, ':').collect();
        let [arn, partition, "events", region, account, resource] = parts.as_slice() else {
            return Err(shape.into());
        };
        let name = resource.strip_prefix("event-bus/").ok_or(shape)?;
        if *arn != "arn" || !partition.starts_with("aws") {
            return Err(shape.into());
        }
        if !valid_region(region) {
            return Err(format!("{region:?} is not an AWS region"));
        }
        if !valid_account(account) {
            return Err("the account is 12 digits".into());
        }
        let name_ok = (1..=256).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'));
        if !name_ok {
            return Err("a bus name is 1 to 256 letters, digits, '.', '-', '_' or '/'".into());
        }
        Ok(Self {
            region: (*region).to_owned(),
            arn: endpoint.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sk_2_eventbridge_endpoints_are_bus_arns() {
        let t = BusTarget::parse("arn:aws:events:us-east-1:123456789012:event-bus/lerian")
            .expect("valid");
        assert_eq!(t.region, "us-east-1");
        for bad in [
            "arn:aws:sqs:us-east-1:123456789012:event-bus/x",
            "arn:aws:events:us-east-1:123456789012:rule/x",
            "arn:aws:events:evil.com:123456789012:event-bus/x",
            "arn:aws:events:us-east-1:1:event-bus/x",
            "arn:aws:events:us-east-1:123456789012:event-bus/",
            "arn:aws:events:us-east-1:123456789012:event-bus/a b",
            "https://events.us-east-1.amazonaws.com/",
        ] {
            assert!(BusTarget::parse(bad).is_err(), "{bad} must be refused");
        }
    }
}

//! Delegated AWS grants (R-CP-7) for `sqs` and `eventbridge` subscriptions, with no credential
//! crossing the API:
//!
//! 1. `GET …/setup-artifacts`: the trust policy (the hub's principal may assume the role only
//!    with this subscription's ExternalId), the permissions the role needs on the destination, a
//!    CloudFormation quick-create link that builds the role, and the ExternalId;
//! 2. `PUT …/delegated-grant` (idempotency key): records the role ARN and region after the
//!    confused-deputy check — an AssumeRole *without* the ExternalId must fail, else 422
//!    `trust_policy_unsafe`; when STS cannot answer, 500 `sts_unavailable`; either way nothing is
//!    written. `verification_state` does not change;
//! 3. `POST …/verify` runs the hardened probe (`probe.rs`: the same check, then AssumeRole with
//!    the ExternalId and a synthetic publish with the role's credentials) and activates.
//!
//! Deliveries assume the role (`hub_core::sink::grant::StsRoles`: cached per subscription,
//! renewed five minutes before expiry).

use serde_json::{json, Map, Value};

use crate::answer::{Answer, Served};
use crate::auth::Principal;
use crate::partners::Operation;
use crate::service::{write_outcome, Control, Mutation, Outcome};
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{binding, parse_object, SinkKind, Subscription};
use hub_core::sink::credential::Credential;
use hub_core::sink::eventbridge::endpoint::BusTarget;
use hub_core::sink::grant::{check_trust, external_id, known_region, valid_role_arn, Trust};
use hub_core::sink::sqs::endpoint::SqsTarget;

/// What a grant's destination is in IAM's terms: its region, ARN and the one action the role
/// must allow on it.
struct Destination {
    region: String,
    arn: String,
    action: &'static str,
}

fn destination(sub: &Subscription) -> Result<Destination, ApiError> {
    let endpoint = sub.endpoint.as_deref().unwrap_or_default();
    let bad = |why: String| ApiError::new(ErrorCode::InvalidEndpoint, why);
    match sub.sink_kind {
        SinkKind::Sqs => {
            let t = SqsTarget::parse(endpoint).map_err(bad)?;
            Ok(Destination {
                arn: format!("arn:aws:sqs:{}:{}:{}", t.region, t.account, t.queue),
                region: t.region,
                action: "sqs:SendMessage",
            })
        }
        SinkKind::Eventbridge => {
            let t = BusTarget::parse(endpoint).map_err(bad)?;
            Ok(Destination {
                region: t.region,
                arn: t.arn,
                action: "events:PutEvents",
            })
        }
        kind => Err(ApiError::new(
            ErrorCode::GrantUnsupported,
            format!("a {kind} subscription takes no delegated AWS grant (sqs and eventbridge do)"),
        )),
    }
}

/// Percent-encodes a query value.
fn encoded(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

impl Control {
    /// The hub principal's ARN, or 503 `delegated_grants_unconfigured`.
    fn principal_arn(&self) -> Result<&str, ApiError> {
        let settings = &self.sinks.roles.settings;
        match (&settings.principal_arn, &settings.principal) {
            (Some(arn), Some(_)) => Ok(arn),
            _ => Err(ApiError::new(
                ErrorCode::DelegatedGrantsUnconfigured,
                "the operator has configured no AWS principal for delegated grants",
            )),
        }
    }

    /// `GET /v1/subscriptions/:id/setup-artifacts` (R-CP-7).
    pub async fn setup_artifacts(&self, who: &Principal, id: &str) -> Served {
        self.admit(who, Operation::SetupArtifacts)?;
        let sub = self.live(who, id).await?;
        let dest = destination(&sub)?;
        let principal = self.principal_arn()?;
        let external = external_id(&sub);
        let role_name = format!("lerian-streaming-{}", &sub.id.simple().to_string()[..12]);
        let trust_policy = json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"AWS": principal},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external}},
            }],
        });
        let permissions_policy = json!({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": dest.action, "Resource": dest.arn}],
        });
        let link = format!(
            "https://console.aws.amazon.com/cloudformation/home?region={region}#/stacks/quickcreate\
             ?templateURL={template}&stackName={role_name}&param_RoleName={role_name}\
             &param_HubPrincipalArn={principal}&param_ExternalId={external}\
             &param_DestinationArn={dest_arn}&param_Action={action}",
            region = dest.region,
            template = encoded(&self.sinks.roles.settings.grant_template_url),
            principal = encoded(principal),
            external = encoded(&external),
            dest_arn = encoded(&dest.arn),
            action = encoded(dest.action),
        );
        Ok(Answer::ok(json!({
            "external_id": external,
            "principal_arn": principal,
            "role_name": role_name,
            "trust_policy": trust_policy,
            "permissions_policy": permissions_policy,
            "cloudformation_quick_create_url": link,
        })))
    }

    /// `PUT /v1/subscriptions/:id/delegated-grant` (R-CP-7).
    pub async fn put_grant(&self, who: &Principal, id: &str, m: Mutation<'_>) -> Served {
        self.admit(who, Operation::Grant)?;
        let body = m.body;
        self.idempotent(who, &m, || async {
            let current = match self.live(who, id).await {
                Ok(s) => s,
                Err(e) => return Outcome::Refused(e),
            };
            let grant = match parse_object(body).and_then(|b| self.grant_of(&current, &b)) {
                Ok(g) => g,
                Err(e) => return Outcome::Refused(e),
            };
            let Credential::AwsRole { role_arn, region } = &grant else {
                return Outcome::Refused(ApiError::internal("not a grant"));
            };
            match check_trust(&self.sinks.roles, role_arn, region).await {
                Trust::Demanded => {}
                Trust::Unsafe => {
                    return Outcome::Refused(ApiError::new(
                        ErrorCode::TrustPolicyUnsafe,
                        "the role can be assumed without this subscription's ExternalId; \
                         its trust policy must demand it (see setup-artifacts)",
                    ))
                }
                Trust::Unknown(o) => {
                    tracing::warn!(detail = %o.detail, "STS did not answer a grant's trust check");
                    return Outcome::Refused(ApiError::new(
                        ErrorCode::StsUnavailable,
                        "AWS STS could not answer the trust check; nothing was stored",
                    ));
                }
            }
            let mut next = current.clone();
            next.secret = match self.keyring.seal(&grant.to_bytes(), &binding(&next)) {
                Ok(s) => Some(s),
                Err(e) => return Outcome::Refused(ApiError::internal(e.to_string())),
            };
            next.revision += 1;
            next.updated_at_ms = (self.now_ms)();
            if let Err(e) = self.write(&next, current.revision).await {
                return write_outcome(e);
            }
            Outcome::Written(Answer::ok(next.view()).with_etag(&next))
        })
        .await
    }

    /// The grant a `delegated-grant` body asks for: `role_arn`, `region` and, optionally,
    /// `destination` (which must be the subscription's endpoint: a move is an edit).
    fn grant_of(
        &self,
        sub: &Subscription,
        body: &Map<String, Value>,
    ) -> Result<Credential, ApiError> {
        destination(sub)?;
        self.principal_arn()?;
        if let Some(k) = body
            .keys()
            .find(|k| !matches!(k.as_str(), "role_arn" | "region" | "destination"))
        {
            return Err(ApiError::invalid(format!(
                "unknown field {k:?}; a grant has role_arn, region and destination"
            )));
        }
        let text = |name: &str| body.get(name).and_then(Value::as_str);
        let role_arn = text("role_arn")
            .filter(|a| valid_role_arn(a))
            .ok_or_else(|| {
                ApiError::invalid("role_arn is an IAM role ARN: arn:aws:iam::<account>:role/<name>")
            })?;
        let region = text("region")
            .filter(|r| known_region(r))
            .ok_or_else(|| ApiError::invalid("region is required and must be an AWS region"))?;
        match body.get("destination") {
            None | Some(Value::Null) => {}
            Some(d) if d.as_str() == sub.endpoint.as_deref() => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    "destination must be the subscription's endpoint (PATCH moves it)",
                ))
            }
        }
        Ok(Credential::AwsRole {
            role_arn: role_arn.to_owned(),
            region: region.to_owned(),
        })
    }
}

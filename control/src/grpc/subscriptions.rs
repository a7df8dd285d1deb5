//! The `Subscriptions` and `Catalog` gRPC services: each method authenticates, reads its metadata,
//! calls one service operation and renders the answer.

use tonic::{Request, Response, Status};

use super::pb::catalog_server::Catalog;
use super::pb::subscriptions_server::Subscriptions;
use super::{convert, pb, text, view, Grpc};
use crate::probe::ProbeKind;
use crate::service::Mutation;

type Answer<T> = Result<Response<T>, Status>;

/// An idempotent change's key, from `x-idempotency`.
fn key<T>(r: &Request<T>) -> Result<Option<String>, Status> {
    text(r.metadata(), "x-idempotency")
}

#[tonic::async_trait]
impl Subscriptions for Grpc {
    async fn create(&self, r: Request<pb::CreateSubscriptionRequest>) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let key = key(&r)?;
        let body = convert::create_body(r.get_ref());
        let change = Mutation {
            method: "POST",
            path: "/v1/subscriptions",
            key: key.as_deref(),
            body: &body,
        };
        let (v, etag) = view(self.control.create(&who, change).await)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }

    async fn get(&self, r: Request<pb::GetSubscriptionRequest>) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let (v, etag) = view(self.control.get(&who, &r.get_ref().id).await)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }

    async fn list(
        &self,
        r: Request<pb::ListSubscriptionsRequest>,
    ) -> Answer<pb::ListSubscriptionsResponse> {
        let who = self.caller(r.metadata())?;
        let q = r.get_ref();
        let limit = q.limit.map(|l| l.to_string());
        let (page, _) = view(
            self.control
                .list(&who, q.cursor.as_deref(), limit.as_deref())
                .await,
        )?;
        let items = page["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|v| convert::subscription(v, None))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Response::new(pb::ListSubscriptionsResponse {
            items,
            next_cursor: page["next_cursor"].as_str().map(str::to_owned),
        }))
    }

    async fn edit(&self, r: Request<pb::EditSubscriptionRequest>) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let key = key(&r)?;
        let if_match = text(r.metadata(), "if-match")?;
        let id = r.get_ref().id.clone();
        let body = convert::edit_body(r.get_ref());
        let path = format!("/v1/subscriptions/{id}");
        let change = Mutation {
            method: "PATCH",
            path: &path,
            key: key.as_deref(),
            body: &body,
        };
        let served = self
            .control
            .patch(&who, &id, if_match.as_deref(), change)
            .await;
        let (v, etag) = view(served)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }

    async fn delete(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::Deleted> {
        let who = self.caller(r.metadata())?;
        let key = key(&r)?;
        let id = &r.get_ref().id;
        let path = format!("/v1/subscriptions/{id}");
        let change = Mutation {
            method: "DELETE",
            path: &path,
            key: key.as_deref(),
            body: b"",
        };
        view(self.control.delete(&who, id, change).await)?;
        Ok(Response::new(pb::Deleted {}))
    }

    async fn pause(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::Subscription> {
        self.set_paused(r, true).await
    }

    async fn resume(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::Subscription> {
        self.set_paused(r, false).await
    }

    async fn ping(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::ProbeResult> {
        self.probe(r, ProbeKind::Ping).await
    }

    async fn verify(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::ProbeResult> {
        self.probe(r, ProbeKind::Verify).await
    }

    async fn rotate_secret(&self, r: Request<pb::SubscriptionId>) -> Answer<pb::RotatedSecret> {
        let who = self.caller(r.metadata())?;
        let key = key(&r)?;
        let id = &r.get_ref().id;
        let path = format!("/v1/subscriptions/{id}/secret/rotate");
        let change = Mutation {
            method: "POST",
            path: &path,
            key: key.as_deref(),
            body: b"",
        };
        let (v, etag) = view(self.control.rotate(&who, id, change).await)?;
        Ok(Response::new(pb::RotatedSecret {
            secret: v["secret"].as_str().unwrap_or_default().to_owned(),
            overlap_until: v["overlapUntil"].as_str().map(str::to_owned),
            etag: etag.unwrap_or_default(),
        }))
    }

    async fn put_credential(
        &self,
        r: Request<pb::PutCredentialRequest>,
    ) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let q = r.get_ref();
        let served = self
            .control
            .put_credential(&who, &q.id, q.credential_json.as_bytes())
            .await;
        let (v, etag) = view(served)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }

    async fn get_setup_artifacts(
        &self,
        r: Request<pb::SubscriptionId>,
    ) -> Answer<pb::SetupArtifacts> {
        let who = self.caller(r.metadata())?;
        let (v, _) = view(self.control.setup_artifacts(&who, &r.get_ref().id).await)?;
        let text = |f: &str| v[f].as_str().unwrap_or_default().to_owned();
        Ok(Response::new(pb::SetupArtifacts {
            external_id: text("external_id"),
            principal_arn: text("principal_arn"),
            role_name: text("role_name"),
            trust_policy_json: v["trust_policy"].to_string(),
            permissions_policy_json: v["permissions_policy"].to_string(),
            cloudformation_quick_create_url: text("cloudformation_quick_create_url"),
        }))
    }

    async fn put_delegated_grant(
        &self,
        r: Request<pb::PutDelegatedGrantRequest>,
    ) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let key = key(&r)?;
        let q = r.get_ref();
        let path = format!("/v1/subscriptions/{}/delegated-grant", q.id);
        let mut grant = serde_json::json!({"role_arn": q.role_arn, "region": q.region});
        if let Some(d) = &q.destination {
            grant["destination"] = d.clone().into();
        }
        let body = grant.to_string();
        let change = Mutation {
            method: "PUT",
            path: &path,
            key: key.as_deref(),
            body: body.as_bytes(),
        };
        let (v, etag) = view(self.control.put_grant(&who, &q.id, change).await)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }
}

impl Grpc {
    async fn set_paused(
        &self,
        r: Request<pb::SubscriptionId>,
        pause: bool,
    ) -> Answer<pb::Subscription> {
        let who = self.caller(r.metadata())?;
        let id = &r.get_ref().id;
        view(self.control.set_paused(&who, id, pause).await)?;
        let (v, etag) = view(self.control.get(&who, id).await)?;
        Ok(Response::new(convert::subscription(&v, etag)))
    }

    async fn probe(
        &self,
        r: Request<pb::SubscriptionId>,
        kind: ProbeKind,
    ) -> Answer<pb::ProbeResult> {
        let who = self.caller(r.metadata())?;
        let (v, _) = view(self.control.probe(&who, &r.get_ref().id, kind).await)?;
        Ok(Response::new(convert::probe(&v)))
    }
}

#[tonic::async_trait]
impl Catalog for Grpc {
    async fn list(&self, r: Request<pb::ListCatalogRequest>) -> Answer<pb::CatalogList> {
        let who = self.caller(r.metadata())?;
        let (list, _) = view(self.control.catalog(&who).await)?;
        Ok(Response::new(pb::CatalogList {
            items: convert::catalog_entries(&list, "items"),
            hub: convert::catalog_entries(&list, "hub"),
        }))
    }
}

//! Partners through the gateway relay (R-CP-17). A call whose token carries `partner_id` is a
//! partner's, relayed by the Consignado gateway. With no partner directory configured
//! (`STREAMING_HUB_PARTNERS_URL` unset) every such call is refused with 403
//! `delegated_relay_refused`. With one, a partner may create, list, read, edit, pause, resume,
//! ping, rotate, read the health of and delete push subscriptions — only those it created
//! (another's, or the tenant's own, read as absent) — and nothing else: no pull subscriptions, no
//! verify, credentials, grants, dead letters, pull reads or catalog. Its subscriptions deliver
//! only while Access Manager shows it active (`hub_core::partners`, asked by the engine's lanes).
//!
//! Every operation of `Control` starts with [`Control::admit`]: the relay rules, then the
//! token's permission.

use crate::auth::{Permission, Principal};
use crate::service::Control;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::Subscription;

/// Every operation of `/v1`, as admission sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    List,
    Read,
    Edit,
    Delete,
    Pause,
    Resume,
    Ping,
    Verify,
    Rotate,
    Credential,
    SetupArtifacts,
    Grant,
    Health,
    Pull,
    DeadLetters,
    Replay,
    Catalog,
}

impl Operation {
    /// The token permission the operation needs.
    fn permission(self) -> Permission {
        use Operation::*;
        match self {
            List | Read | Health | Pull | DeadLetters | Catalog | SetupArtifacts => Permission::Get,
            Edit => Permission::Patch,
            Delete => Permission::Delete,
            Create | Pause | Resume | Ping | Verify | Rotate | Credential | Grant | Replay => {
                Permission::Post
            }
        }
    }

    /// Whether the gateway relays it for partners (R-CP-17's list).
    fn relayed(self) -> bool {
        use Operation::*;
        matches!(
            self,
            Create | List | Read | Edit | Pause | Resume | Ping | Rotate | Health | Delete
        )
    }
}

fn refused(why: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::DelegatedRelayRefused, why)
}

impl Control {
    /// Whether `who` may run `op`: a partner's call only through a configured relay and only
    /// for the operations relayed; then the token's permission.
    pub fn admit(&self, who: &Principal, op: Operation) -> Result<(), ApiError> {
        if who.partner.is_some() {
            if self.partners.is_none() {
                return Err(refused(
                    "partner calls are not relayed here (no STREAMING_HUB_PARTNERS_URL)",
                ));
            }
            if !op.relayed() {
                return Err(refused(format!("{op:?} is not relayed for partners")));
            }
        }
        who.require(op.permission())
    }
}

/// Whether `who` reaches `sub`: a partner only the subscriptions it created; anyone else every
/// subscription of the tenant.
pub fn reaches(who: &Principal, sub: &Subscription) -> bool {
    who.partner.is_none() || sub.partner == who.partner
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_core::model::SinkKind;

    fn principal(partner: Option<&str>) -> Principal {
        Principal {
            subject: "s".into(),
            tenant: "t".into(),
            permissions: vec![
                "subscriptions:get".into(),
                "subscriptions:post".into(),
                "subscriptions:patch".into(),
                "subscriptions:delete".into(),
            ],
            partner: partner.map(str::to_owned),
            sources: Vec::new(),
        }
    }

    #[test]
    fn r_cp_17_partners_reach_only_their_own_subscriptions() {
        let mut sub = Subscription::new("t", "n", SinkKind::Webhook, 0);
        assert!(reaches(&principal(None), &sub), "the tenant reaches all");
        assert!(!reaches(&principal(Some("fund-1")), &sub));
        sub.partner = Some("fund-1".into());
        assert!(reaches(&principal(Some("fund-1")), &sub));
        assert!(!reaches(&principal(Some("fund-2")), &sub));
        assert!(reaches(&principal(None), &sub));
    }

    #[test]
    fn r_cp_17_the_relayed_operations_are_the_specs_list() {
        use Operation::*;
        let relayed = [
            Create, List, Read, Edit, Pause, Resume, Ping, Rotate, Health, Delete,
        ];
        let not = [
            Verify,
            Credential,
            SetupArtifacts,
            Grant,
            Pull,
            DeadLetters,
            Replay,
            Catalog,
        ];
        assert!(relayed.iter().all(|o| o.relayed()));
        assert!(not.iter().all(|o| !o.relayed()));
    }
}

//! Rewriting a subscription that may change under the writer: an operation reads it, decides,
//! and writes on the condition that its revision did not move. The engine writes delivery marks
//! to subscriptions, so an operation that names no revision (no `If-Match`) must not fail
//! because one landed between its read and its write: it reads and decides again.

use std::future::Future;

use hub_core::error::{ApiError, ErrorCode};

/// How many reads and conditional rewrites an operation tries before it answers
/// `subscription_contended`.
pub(crate) const WRITE_ATTEMPTS: usize = 5;

/// One read, decision and conditional write.
pub(crate) enum Attempt<T> {
    /// The operation's answer: written, refused, or failed.
    Answered(T),
    /// The write lost to another writer; reading again may decide differently.
    Lost,
}

/// Runs `attempt` until it answers, at most [`WRITE_ATTEMPTS`] times; `None` when every try lost
/// (the caller answers [`contended`]).
pub(crate) async fn until_answered<T, F, Fut>(mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    for _ in 0..WRITE_ATTEMPTS {
        if let Attempt::Answered(answer) = attempt().await {
            return Some(answer);
        }
    }
    None
}

/// Every try lost to another writer.
pub(crate) fn contended() -> ApiError {
    ApiError::new(
        ErrorCode::SubscriptionContended,
        "the subscription kept changing; retry",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn r_cp_10_a_lost_write_is_tried_again_and_the_first_answer_is_kept() {
        let mut tries = 0;
        let answer = until_answered(|| {
            tries += 1;
            let n = tries;
            async move {
                if n < 3 {
                    Attempt::Lost
                } else {
                    Attempt::Answered(n)
                }
            }
        })
        .await;
        assert_eq!(answer, Some(3));
        assert_eq!(tries, 3, "nothing runs after the answer");
    }

    #[tokio::test]
    async fn r_cp_10_writes_that_always_lose_end_after_the_bound() {
        let mut tries = 0;
        let answer: Option<()> = until_answered(|| {
            tries += 1;
            async { Attempt::Lost }
        })
        .await;
        assert_eq!(answer, None);
        assert_eq!(tries, WRITE_ATTEMPTS);
    }
}

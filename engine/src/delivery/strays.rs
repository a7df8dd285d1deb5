//! The survey of lanes (`ownership`, lanes numbered by partition): every `SURVEY_EVERY`, asks the
//! store for the assigned lanes another engine holds, adopts lanes nobody has held for
//! `STRAY_GRACE_MS`, and gives up strays an assigned engine asks for or that have emptied.

use std::sync::Arc;
use std::time::Duration;

use super::ownership::{Ownership, STRAY_GRACE_MS};
use crate::runtime::Stop;
use crate::store::{LaneHolds, LaneSurvey};

const SURVEY_EVERY: Duration = Duration::from_secs(2);

/// Runs until `stop`.
pub async fn survey(ownership: Arc<Ownership>, store: Arc<dyn LaneHolds>, stop: Stop) {
    while !stop.sleep(SURVEY_EVERY).await {
        let (assigned, strays) = ownership.survey_input();
        let now_ms = crate::clock::now_ms();
        let asked = LaneSurvey {
            assigned,
            strays,
            grace_ms: STRAY_GRACE_MS,
            now_ms,
        };
        match store.survey_lanes(asked).await {
            Ok(found) => {
                if !found.unheld.is_empty() || !found.give_up.is_empty() {
                    tracing::info!(adopt = ?found.unheld, give_up = ?found.give_up, "stray delivery lanes");
                }
                ownership.apply_survey(&found.unheld, &found.give_up, now_ms);
            }
            Err(e) => tracing::warn!(error = %e, "surveying delivery lanes failed"),
        }
    }
}

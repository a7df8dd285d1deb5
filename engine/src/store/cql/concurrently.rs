//! Many requests in flight at once, bounded.

use futures::{StreamExt, TryStreamExt};

use crate::store::StoreError;

/// Reads or writes of one phase in flight at once.
const CONCURRENCY: usize = 64;

/// Runs writes (or reads) at most `CONCURRENCY` at a time; answers in the order asked. Not
/// `async`: the futures are made here, so the closure that made them is not part of the returned future (a `Send` future
/// holding such closures trips the compiler's higher-ranked lifetime check).
pub(super) fn all<F, T>(
    futures: impl IntoIterator<Item = F>,
) -> impl std::future::Future<Output = Result<Vec<T>, StoreError>>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let made: Vec<F> = futures.into_iter().collect();
    futures::stream::iter(made)
        .buffered(CONCURRENCY)
        .try_collect()
}

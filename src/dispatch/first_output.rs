//! The wait for a first token: call the upstream and read until its first output event,
//! under the task's deadline, and for a JSON answer read it whole and check it before
//! anything is committed.

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use crate::adapter::{self, Call, Transport};
use crate::canonical::EventStream;
use crate::canonical::{ChatRequest, ErrorClass, Event, UpstreamError};

/// Call the upstream and read until its first output event, within `deadline` of the call.
/// Returns the events read so far, the rest of the stream, and when the first output came. A
/// stream that ends with no output at all (an empty answer) is also a success.
///
/// When the request wants JSON (`response_format`), the whole answer is read here, each event
/// within `idle` of the last, and checked against the format before anything is committed: a
/// bad answer is an [`ErrorClass::InvalidOutput`] failure of this backend, so dispatch may
/// still try the next one and the client never sees the rejected text. An answer that calls
/// tools is not checked (the JSON is due in a later turn).
///
/// Every upstream error, at once or in the stream, comes cut of every secret (the call's
/// redactor, in [`adapter::send`]), so none reaches the records, the logs or the client.
pub(super) async fn first_output(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    deadline: Duration,
    idle: Duration,
) -> Result<(Vec<Event>, EventStream, Instant), UpstreamError> {
    let timed_out = || {
        UpstreamError::new(
            ErrorClass::Timeout,
            None,
            format!("no first token within {} ms", deadline.as_millis()),
        )
    };
    let read_first = async {
        let mut stream = adapter::send(transport, call, req).await?;
        let mut buffered = Vec::new();
        while let Some(item) = stream.next().await {
            let event = item?;
            let output = event.is_output();
            buffered.push(event);
            if output {
                break;
            }
        }
        Ok::<_, UpstreamError>((buffered, stream, Instant::now()))
    };
    let (mut buffered, mut stream, first_token) =
        tokio::time::timeout(deadline, read_first).await.unwrap_or_else(|_| Err(timed_out()))?;
    if !req.response_format.wants_json() {
        return Ok((buffered, stream, first_token));
    }
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(item)) => buffered.push(item?),
            Ok(None) => break,
            Err(_) => {
                return Err(UpstreamError::new(
                    ErrorClass::Timeout,
                    None,
                    format!("the answer stalled for {} ms before it was complete", idle.as_millis()),
                ))
            }
        }
    }
    if !buffered.iter().any(|e| matches!(e, Event::ToolCallDelta { .. })) {
        let text: String = buffered
            .iter()
            .filter_map(|e| match e {
                Event::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        req.response_format
            .check(&text)
            .map_err(|why| UpstreamError::new(ErrorClass::InvalidOutput, None, why))?;
    }
    Ok((buffered, Box::pin(futures::stream::empty()), first_token))
}

//! Batch jobs that fill the fleet's idle hours: the OpenAI Files and Batch APIs and Anthropic's
//! Message Batches (the routes are the front door's, `api::batches`), kept in the ledger store
//! (`store`), checked line by line as the providers check them (`lines`), and run by a control
//! loop (`runner`) on the free slots of the fleet (`admission`), each line through its
//! dialect's door (in process) and the same pipeline as a realtime request, at batch priority. A job's statuses and its
//! lines' states are `job`'s. What has been kept long enough is deleted by `retention`.

pub mod admission;
pub mod deadline;
pub mod job;
pub mod lease;
pub mod lines;
pub mod provider_api;
pub mod retention;
pub mod runner;
pub mod spill;
pub mod store;

//! What the request path consults before each upstream call: the node's breaker, the retry
//! budget, the hosted quotas, and the holds an operator put on a backend or node. Each is a
//! board shared by dispatch (which reads and feeds it) and the control loops (which publish
//! its state into the snapshot); none does I/O on the request path. A node's breaker, load
//! counters and slots are reached through the handle its snapshot view holds (`node`).
//! Client keys' limits and budgets (`budget`) are consulted once per request, before dispatch.

pub mod breaker;
pub mod budget;
pub mod holds;
pub mod node;
pub mod quota;
pub mod retry_budget;
pub mod wait_queue;

//! The self-hosted fleet as the router sees it: what each vLLM node reports, what the router
//! itself has sent it, and (pure) whether it has headroom for a request.

pub mod load;

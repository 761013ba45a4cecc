//! What every command that talks to the server needs, and the helpers below the commands
//! (`wait`, `plan`) take: the client and the output.

use crate::client::Client;
use crate::output::Out;

#[derive(Debug)]
pub struct Ctx {
    pub client: Client,
    pub out: Out,
}

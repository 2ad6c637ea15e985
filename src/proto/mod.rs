//! The client protocol (docs/protocol.md): the handshake, the frames, and blocking helpers that
//! read and write them. Everything here is pure encoding and decoding except `io`,
//! which moves whole frames over any `Read`/`Write`.

pub mod addr;
mod fields;
pub mod frame;
pub mod handshake;
pub mod io;
pub mod limits;
mod pool_frames;

pub use frame::{
    decode_request, decode_response, encode_request, encode_response, DecodeError, ErrorCode, HoldPart,
    PoolHolder, Request, Response, TopKey, TOP_KEYS_MAX,
};

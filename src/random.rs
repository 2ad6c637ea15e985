//! Random numbers from the operating system, for the few values that must be
//! unpredictable or unique across processes: node ids drawn at start, process
//! incarnations, fencing domains, Raft seeds. (The pure cores take their randomness
//! as an input; this is where the server draws it.)

use ring::rand::{SecureRandom, SystemRandom};

/// 64 random bits. Panics if the operating system's source fails: nothing a node
/// draws here can be made up instead (a guessable id or domain is a broken promise).
pub fn u64() -> u64 {
    let mut bytes = [0u8; 8];
    SystemRandom::new().fill(&mut bytes).expect("the operating system's random source failed");
    u64::from_be_bytes(bytes)
}

/// A random value of `bits` bits (1..=64), never 0.
pub fn nonzero(bits: u32) -> u64 {
    loop {
        let v = u64() >> (64 - bits.clamp(1, 64));
        if v != 0 {
            return v;
        }
    }
}

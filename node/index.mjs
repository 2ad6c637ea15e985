// index.mjs: the package's ES module entry point: the CommonJS implementation's exports,
// by name (one implementation, one native library, whichever way it is imported).
import ticketing from "./index.cjs";

export const {
  Client,
  Lock,
  TicketingError,
  Busy,
  Timeout,
  NotLeader,
  InvalidArgument,
  Overloaded,
  Unavailable,
  Indeterminate,
  NoAnswer,
  ReleaseUnconfirmed,
  ReleaseQueueFull,
  NotHolder,
  ProtocolError,
  Refused,
  ConfigError,
  InternalError,
  Cancelled,
  libraryVersion,
  libraryPath,
} = ticketing;
export default ticketing;

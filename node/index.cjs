// index.cjs: the package's CommonJS entry point — Client, Lock, the error classes and
// the native library's version (index.mjs re-exports the same for ES modules).
"use strict";

const native = require("./lib/native.cjs");
const errors = require("./lib/errors.cjs");
const { Client, Lock } = require("./lib/client.cjs");

/** The native library's release (the crate's version, e.g. "0.2.0"). */
function libraryVersion() {
  return native.C.version_string();
}

/** Where the native library was loaded from. */
function libraryPath() {
  return native.PATH;
}

module.exports = {
  Client,
  Lock,
  TicketingError: errors.TicketingError,
  Busy: errors.Busy,
  Timeout: errors.Timeout,
  NotLeader: errors.NotLeader,
  InvalidArgument: errors.InvalidArgument,
  Overloaded: errors.Overloaded,
  Unavailable: errors.Unavailable,
  Indeterminate: errors.Indeterminate,
  NoAnswer: errors.NoAnswer,
  ReleaseUnconfirmed: errors.ReleaseUnconfirmed,
  ReleaseQueueFull: errors.ReleaseQueueFull,
  NotHolder: errors.NotHolder,
  ProtocolError: errors.ProtocolError,
  Refused: errors.Refused,
  ConfigError: errors.ConfigError,
  InternalError: errors.InternalError,
  Cancelled: errors.Cancelled,
  libraryVersion,
  libraryPath,
};

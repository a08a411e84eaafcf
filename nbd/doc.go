// Package nbd serves a Backend (for blkcrypt, a decrypted volume) over the
// Network Block Device protocol, as described in doc/proto.md of the
// NetworkBlockDevice/nbd project. It is used by `blkcrypt serve`. Its tests
// run libnbd's nbdinfo and nbdcopy and qemu-img against it (over TCP, Unix
// sockets and TLS); the Linux kernel client speaks the same subset.
//
// # Negotiation
//
// Only fixed newstyle negotiation is spoken. The server greets with
// NBD_FLAG_FIXED_NEWSTYLE and NBD_FLAG_NO_ZEROES and drops clients that set
// unknown client flags. Options:
//
//   - NBD_OPT_EXPORT_NAME, NBD_OPT_GO, NBD_OPT_INFO: an export is found by
//     its name. The single export of a NewServer server also answers to the
//     default name "" (as qemu-nbd does); a NewGateway server's "" reaches
//     only an export named "" (as qemu-nbd and nbdkit with several
//     exports). Any other name is NBD_REP_ERR_UNKNOWN (GO/INFO) or a closed
//     connection (EXPORT_NAME, which cannot report errors). GO and INFO
//     reply with NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE, plus NBD_INFO_NAME
//     and NBD_INFO_DESCRIPTION when asked.
//   - NBD_OPT_LIST: one NBD_REP_SERVER (name and description) per export,
//     in name order.
//   - NBD_OPT_STRUCTURED_REPLY: enables structured replies.
//   - NBD_OPT_STARTTLS: see TLS below; without Options.TLSConfig it is
//     refused with NBD_REP_ERR_POLICY.
//   - NBD_OPT_ABORT: acknowledged, then the connection is closed.
//   - Anything else (including the metadata-context and extended-header
//     options) is refused with NBD_REP_ERR_UNSUP after skipping its data.
//
// Malformed known options get NBD_REP_ERR_INVALID; options with more than
// 256 KiB of data get NBD_REP_ERR_TOO_BIG (unknown ones NBD_REP_ERR_UNSUP).
// The whole negotiation, including any TLS handshake, must finish within
// Options.HandshakeTimeout and within 1024 options, or the connection is
// closed. A client that did not set NBD_FLAG_C_FIXED_NEWSTYLE may only send
// NBD_OPT_EXPORT_NAME.
//
// # TLS
//
// With Options.TLSConfig set, TLS is mandatory (the protocol's FORCEDTLS
// mode): before NBD_OPT_STARTTLS every option other than NBD_OPT_ABORT is
// refused with NBD_REP_ERR_TLS_REQD, and NBD_OPT_EXPORT_NAME closes the
// connection. STARTTLS with data, or a second STARTTLS, gets
// NBD_REP_ERR_INVALID. Negotiation state (structured replies) is reset by a
// successful STARTTLS. libnbd clients connect with
// nbds://host:port/name?tls-certificates=DIR, DIR holding ca-cert.pem.
//
// # Several exports
//
// NewGateway makes a server for many volumes; AddExport and RemoveExport
// change its exports while it serves. Each Export carries its own
// ReadOnly, AllowDiscards and MultiConn; MaxConns, the timeouts, TLS and
// MaxRequest are the server's. A connection is bound to one export when
// NBD_OPT_GO or NBD_OPT_EXPORT_NAME succeeds. A backend's errors fail only
// the requests of its export. The first failure after a success is logged
// and leaves the export out of NBD_OPT_LIST until one of its requests
// succeeds again (it can still be reached by name); later failures are
// logged at most once per 10 s per export, with a count of the rest. RemoveExport treats that export's connections as
// Shutdown treats all: they stop reading, their in-flight requests are
// answered, the backend is flushed, and then they are closed; other
// exports' connections are untouched, and the backend is the caller's to
// close afterwards. Shutdown (or a cancelled Serve) flushes every export.
//
// # Export parameters
//
// Transmission flags: NBD_FLAG_HAS_FLAGS and NBD_FLAG_SEND_FLUSH always;
// NBD_FLAG_READ_ONLY if Options.ReadOnly; otherwise NBD_FLAG_SEND_FUA and
// NBD_FLAG_SEND_WRITE_ZEROES, and NBD_FLAG_SEND_TRIM when
// Options.AllowDiscards is set and the backend is a Discarder;
// NBD_FLAG_CAN_MULTI_CONN if Options.MultiConn. CACHE, BLOCK_STATUS, DF and
// FAST_ZERO are not offered.
//
// Block sizes: minimum = Backend.BlockSize() (the sector size; 1 if it is
// not a power of two up to 64 KiB or does not divide the size), preferred =
// max(4096, minimum), maximum = Options.MaxRequest (default 32 MiB, clamped
// to [64 KiB, 256 MiB]). Clients that asked for NBD_INFO_BLOCK_SIZE in
// NBD_OPT_GO promised to honour the minimum, so their misaligned requests
// fail with NBD_EINVAL; other clients (NBD_OPT_EXPORT_NAME, e.g. older kernels)
// may send any alignment and the backend is expected to read-modify-write.
// The export size is read from Backend.Size() when the export is chosen.
//
// # Requests
//
// Successful replies are simple replies, except that once structured replies
// are negotiated a READ is answered with one NBD_REPLY_TYPE_OFFSET_DATA chunk
// carrying NBD_REPLY_FLAG_DONE (NBD_REPLY_TYPE_NONE for a zero-length read),
// and every error is an NBD_REPLY_TYPE_ERROR chunk with a short message.
//
//   - READ: data read with Backend.ReadAt; a short read is NBD_EIO.
//   - WRITE: Backend.WriteAt; with NBD_CMD_FLAG_FUA, Backend.Flush before
//     the reply.
//   - FLUSH: Backend.Flush. Every write is acknowledged only after its
//     WriteAt returned, and Flush covers all completed writes on all
//     connections, so a FLUSH covers every write acknowledged before it.
//   - TRIM: Discarder.Discard (FUA honoured).
//   - WRITE_ZEROES: ZeroWriter.WriteZeroes, else zero-filled buffers of at
//     most 1 MiB via WriteAt; NBD_CMD_FLAG_NO_HOLE is accepted (the server
//     never punches holes for it); FUA honoured.
//   - DISC: in-flight requests are finished and answered, then the
//     connection is closed.
//
// NBD_CMD_FLAG_FUA is accepted on every command (ignored where nothing is
// written); other flags not valid for the command are NBD_EINVAL.
//
// Errors: a request extending beyond the export is NBD_EINVAL for READ and
// TRIM and NBD_ENOSPC for WRITE and WRITE_ZEROES (as proto.md recommends); a
// READ longer than the maximum payload is NBD_EOVERFLOW, such a WRITE NBD_EINVAL;
// writes, zeroing and trims on a read-only export are NBD_EPERM; CACHE,
// BLOCK_STATUS and unknown commands are NBD_EINVAL. The payload of a refused
// WRITE is read and discarded so the connection stays usable, unless it is
// larger than max(32 MiB, MaxRequest): then the error is sent and the
// connection closed. Backend errors map syscall errnos: EPERM, EACCES and
// EROFS to NBD_EPERM; ENOSPC, EDQUOT and EFBIG to NBD_ENOSPC; EINVAL, ENOMEM,
// EOVERFLOW and ESHUTDOWN to their NBD values; everything else to NBD_EIO.
//
// A bad request magic or a truncated request closes that connection only;
// other connections are unaffected. Lengths from the wire are validated
// before anything is allocated. A panic while serving a connection (for
// example from the backend) is recovered, logged and closes that
// connection.
//
// # Concurrency and resources
//
// Per connection one goroutine decodes requests and up to 16 workers,
// started as its queue grows, execute them; replies are written whole under
// a per-connection lock and may be sent out of order. At most 16 requests
// (or what a QueueDepther backend asks for, up to 64: nbdcopy's queue) and
// max(2*MaxRequest, 16 MiB) of payload are in flight per connection;
// beyond that the server stops reading from that client. A Backend that
// implements InPlaceWriter gets each write's payload buffer to overwrite.
// One that implements AsyncWriter (a Volume over librbd) has each write
// without FUA started by the decoding goroutine itself, with no worker
// waiting for it; its completion queues the reply for a replier goroutine
// that sends whatever replies have gathered in one write, and the request
// counts as in flight until then. For such a backend, writes that follow
// one another on the export and in the stream, with no FUA and whose
// headers have already arrived (a peek at the socket, never a wait), are
// read into one buffer and started as one write of up to 1 MiB, not
// crossing a 1 MiB boundary: librbd and the OSD spend per operation, and
// nbdcopy's 256 KiB requests reach them as 1 MiB ones. Each request keeps
// its own reply; a merged write that fails fails each of them. Merging
// starts only at the offset where the connection's last write ended, so a
// random writer's buffers stay the size of its requests. Payload buffers come from size-classed
// sync.Pools, so the steady state allocates nothing per request (beyond
// what an AsyncWriter's completion takes), and at most
// max(2*MaxRequest, 16 MiB) of payload per connection is held, so
// Options.MaxConns also bounds the server's memory.
//
// # Connection policy
//
// At most Options.MaxConns connections (default 64) are served at once,
// counting those still negotiating. So that idle connections cannot lock
// other clients out, a client arriving at the cap takes the place of an
// idle connection (one with no request in flight; a negotiating one is idle
// since it was accepted) if there is one it may take:
//
//   - clients are told apart by source address: the IP for TCP, the port
//     ignored; for a Unix socket on Linux the peer's user id
//     (SO_PEERCRED), elsewhere one address for all Unix-socket clients;
//   - a newcomer may replace a connection of its own address, or of an
//     address that holds more connections than its own, never one of an
//     address with as many or fewer: no address is pushed below the
//     newcomer's share;
//   - among those, the address holding the most connections gives up its
//     longest-idle one.
//
// The replaced connection is closed as below and the newcomer is served once
// it has drained (at most HandshakeTimeout later). If no connection may be
// replaced (every eligible one is busy) the newcomer is closed at once and
// ServeConn returns ErrTooManyConns. With Options.IdleTimeout set, a
// negotiated connection with nothing in flight for that long is closed; a
// client that stopped in the middle of a write payload counts as idle. The
// default is no timeout: NBD has no keepalive, and an idle kernel or qemu
// client does not reconnect by default, so the server frees a slot only
// when someone needs it.
//
// # Shutdown
//
// Shutdown stops accepting, stops reading requests, lets in-flight requests
// finish and be answered, flushes the backends, then closes connections
// (sending TLS close_notify). No reply is written once that final flush
// has begun, so every write acknowledged before Shutdown returned is covered
// by it. Requests the server had not read when it stopped get no reply; the
// client sees the connection close. Cancelling the context given to Serve
// does the same for the connections Serve accepted.
//
// Whenever the server ends a connection itself (Shutdown, a cancelled
// context, a replaced or idle connection) it shuts the write side first and
// discards what the client still sends for up to a second before closing:
// closing a TCP socket with unread input sends a reset, which makes the
// client's kernel drop replies it has not read yet, so an answered request
// would look failed.
package nbd

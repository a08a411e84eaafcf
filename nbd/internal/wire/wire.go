// Package wire holds the NBD protocol's wire constants, shared by the
// server (package nbd) and the client (nbd/nbdclient) so that both speak
// from one table. Names follow the protocol document.
package wire

// Wire constants of the NBD protocol (fixed newstyle negotiation and the
// transmission phase). Names follow the protocol document; all values are
// big-endian on the wire.

const (
	NbdMagic        = 0x4e42444d41474943 // "NBDMAGIC"
	OptMagic        = 0x49484156454F5054 // "IHAVEOPT"
	OptReplyMagic   = 0x0003e889045565a9
	RequestMagic    = 0x25609513
	SimpleMagic     = 0x67446698
	StructuredMagic = 0x668e33ef
)

// Handshake flags (server) and client flags.
const (
	FlagFixedNewstyle  = 1 << 0
	FlagNoZeroes       = 1 << 1
	FlagCFixedNewstyle = 1 << 0
	FlagCNoZeroes      = 1 << 1
)

// Option types.
const (
	OptExportName      = 1
	OptAbort           = 2
	OptList            = 3
	OptStartTLS        = 5
	OptInfo            = 6
	OptGo              = 7
	OptStructuredReply = 8
)

// Option reply types.
const (
	RepAck            = 1
	RepServer         = 2
	RepInfo           = 3
	RepErr            = 1 << 31
	RepErrUnsup       = RepErr + 1
	RepErrPolicy      = RepErr + 2
	RepErrInvalid     = RepErr + 3
	RepErrTLSReqd     = RepErr + 5
	RepErrUnknown     = RepErr + 6
	RepErrShutdown    = RepErr + 7
	RepErrTooBig      = RepErr + 9
	InfoExport        = 0
	InfoName          = 1
	InfoDescription   = 2
	InfoBlockSize     = 3
	MaxStringLen      = 4096
	MaxOptionDataLen  = 1 << 18 // largest option payload we buffer (GO/INFO need ~135 KiB at most)
	MaxOptionsPerConn = 1024
)

// Transmission flags (16 bits, sent with the export size).
const (
	FlagHasFlags        = 1 << 0
	FlagReadOnly        = 1 << 1
	FlagSendFlush       = 1 << 2
	FlagSendFUA         = 1 << 3
	FlagRotational      = 1 << 4
	FlagSendTrim        = 1 << 5
	FlagSendWriteZeroes = 1 << 6
	FlagSendDF          = 1 << 7
	FlagCanMultiConn    = 1 << 8
)

// Commands.
const (
	CmdRead        = 0
	CmdWrite       = 1
	CmdDisc        = 2
	CmdFlush       = 3
	CmdTrim        = 4
	CmdCache       = 5
	CmdWriteZeroes = 6
	CmdBlockStatus = 7
)

// Command flags.
const (
	CmdFlagFUA      = 1 << 0
	CmdFlagNoHole   = 1 << 1
	CmdFlagDF       = 1 << 2
	CmdFlagReqOne   = 1 << 3
	CmdFlagFastZero = 1 << 4
)

// Structured reply flags and chunk types.
const (
	ReplyFlagDone       = 1 << 0
	ReplyTypeNone       = 0
	ReplyTypeOffsetData = 1
	ReplyTypeOffsetHole = 2
	ReplyTypeError      = 1<<15 + 1
	ReplyTypeErrorOff   = 1<<15 + 2
)

// Error values carried in replies.
const (
	NbdEPERM     = 1
	NbdEIO       = 5
	NbdENOMEM    = 12
	NbdEINVAL    = 22
	NbdENOSPC    = 28
	NbdEOVERFLOW = 75
	NbdENOTSUP   = 95
	NbdESHUTDOWN = 108
)

const (
	RequestHeaderLen    = 28
	SimpleReplyLen      = 16
	StructuredHeaderLen = 20
	// ReplyPrefix is the room reserved in front of every data buffer so a
	// read reply (simple header, or structured header plus the 8-byte
	// offset) can be sent with one Write without copying the data.
	ReplyPrefix = 32
)

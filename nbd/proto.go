package nbd

// Wire constants of the NBD protocol (fixed newstyle negotiation and the
// transmission phase). Names follow the protocol document; all values are
// big-endian on the wire.

const (
	nbdMagic        = 0x4e42444d41474943 // "NBDMAGIC"
	optMagic        = 0x49484156454F5054 // "IHAVEOPT"
	optReplyMagic   = 0x0003e889045565a9
	requestMagic    = 0x25609513
	simpleMagic     = 0x67446698
	structuredMagic = 0x668e33ef
)

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle  = 1 << 0
	flagNoZeroes       = 1 << 1
	flagCFixedNewstyle = 1 << 0
	flagCNoZeroes      = 1 << 1
)

// Option types.
const (
	optExportName      = 1
	optAbort           = 2
	optList            = 3
	optStartTLS        = 5
	optInfo            = 6
	optGo              = 7
	optStructuredReply = 8
)

// Option reply types.
const (
	repAck            = 1
	repServer         = 2
	repInfo           = 3
	repErr            = 1 << 31
	repErrUnsup       = repErr + 1
	repErrPolicy      = repErr + 2
	repErrInvalid     = repErr + 3
	repErrTLSReqd     = repErr + 5
	repErrUnknown     = repErr + 6
	repErrShutdown    = repErr + 7
	repErrTooBig      = repErr + 9
	infoExport        = 0
	infoName          = 1
	infoDescription   = 2
	infoBlockSize     = 3
	maxStringLen      = 4096
	maxOptionDataLen  = 1 << 18 // largest option payload we buffer (GO/INFO need ~135 KiB at most)
	maxOptionsPerConn = 1024
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
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdCache       = 5
	cmdWriteZeroes = 6
	cmdBlockStatus = 7
)

// Command flags.
const (
	cmdFlagFUA      = 1 << 0
	cmdFlagNoHole   = 1 << 1
	cmdFlagDF       = 1 << 2
	cmdFlagReqOne   = 1 << 3
	cmdFlagFastZero = 1 << 4
)

// Structured reply flags and chunk types.
const (
	replyFlagDone       = 1 << 0
	replyTypeNone       = 0
	replyTypeOffsetData = 1
	replyTypeError      = 1<<15 + 1
)

// Error values carried in replies.
const (
	nbdEPERM     = 1
	nbdEIO       = 5
	nbdENOMEM    = 12
	nbdEINVAL    = 22
	nbdENOSPC    = 28
	nbdEOVERFLOW = 75
	nbdENOTSUP   = 95
	nbdESHUTDOWN = 108
)

const (
	requestHeaderLen    = 28
	simpleReplyLen      = 16
	structuredHeaderLen = 20
	// replyPrefix is the room reserved in front of every data buffer so a
	// read reply (simple header, or structured header plus the 8-byte
	// offset) can be sent with one Write without copying the data.
	replyPrefix = 32
)

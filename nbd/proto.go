package nbd

import "github.com/blkcrypt/blkcrypt/nbd/internal/wire"

// The wire constants live in nbd/internal/wire, which the client
// (nbd/nbdclient) shares; the server keeps its short names for them.

const (
	nbdMagic            = wire.NbdMagic
	optMagic            = wire.OptMagic
	optReplyMagic       = wire.OptReplyMagic
	requestMagic        = wire.RequestMagic
	simpleMagic         = wire.SimpleMagic
	structuredMagic     = wire.StructuredMagic
	flagFixedNewstyle   = wire.FlagFixedNewstyle
	flagNoZeroes        = wire.FlagNoZeroes
	flagCFixedNewstyle  = wire.FlagCFixedNewstyle
	flagCNoZeroes       = wire.FlagCNoZeroes
	optExportName       = wire.OptExportName
	optAbort            = wire.OptAbort
	optList             = wire.OptList
	optStartTLS         = wire.OptStartTLS
	optInfo             = wire.OptInfo
	optGo               = wire.OptGo
	optStructuredReply  = wire.OptStructuredReply
	repAck              = wire.RepAck
	repServer           = wire.RepServer
	repInfo             = wire.RepInfo
	repErr              = wire.RepErr
	repErrUnsup         = wire.RepErrUnsup
	repErrPolicy        = wire.RepErrPolicy
	repErrInvalid       = wire.RepErrInvalid
	repErrTLSReqd       = wire.RepErrTLSReqd
	repErrUnknown       = wire.RepErrUnknown
	repErrShutdown      = wire.RepErrShutdown
	repErrTooBig        = wire.RepErrTooBig
	infoExport          = wire.InfoExport
	infoName            = wire.InfoName
	infoDescription     = wire.InfoDescription
	infoBlockSize       = wire.InfoBlockSize
	maxStringLen        = wire.MaxStringLen
	maxOptionDataLen    = wire.MaxOptionDataLen
	maxOptionsPerConn   = wire.MaxOptionsPerConn
	FlagHasFlags        = wire.FlagHasFlags
	FlagReadOnly        = wire.FlagReadOnly
	FlagSendFlush       = wire.FlagSendFlush
	FlagSendFUA         = wire.FlagSendFUA
	FlagRotational      = wire.FlagRotational
	FlagSendTrim        = wire.FlagSendTrim
	FlagSendWriteZeroes = wire.FlagSendWriteZeroes
	FlagSendDF          = wire.FlagSendDF
	FlagCanMultiConn    = wire.FlagCanMultiConn
	cmdRead             = wire.CmdRead
	cmdWrite            = wire.CmdWrite
	cmdDisc             = wire.CmdDisc
	cmdFlush            = wire.CmdFlush
	cmdTrim             = wire.CmdTrim
	cmdCache            = wire.CmdCache
	cmdWriteZeroes      = wire.CmdWriteZeroes
	cmdBlockStatus      = wire.CmdBlockStatus
	cmdFlagFUA          = wire.CmdFlagFUA
	cmdFlagNoHole       = wire.CmdFlagNoHole
	cmdFlagDF           = wire.CmdFlagDF
	cmdFlagReqOne       = wire.CmdFlagReqOne
	cmdFlagFastZero     = wire.CmdFlagFastZero
	replyFlagDone       = wire.ReplyFlagDone
	replyTypeNone       = wire.ReplyTypeNone
	replyTypeOffsetData = wire.ReplyTypeOffsetData
	replyTypeError      = wire.ReplyTypeError
	nbdEPERM            = wire.NbdEPERM
	nbdEIO              = wire.NbdEIO
	nbdENOMEM           = wire.NbdENOMEM
	nbdEINVAL           = wire.NbdEINVAL
	nbdENOSPC           = wire.NbdENOSPC
	nbdEOVERFLOW        = wire.NbdEOVERFLOW
	nbdENOTSUP          = wire.NbdENOTSUP
	nbdESHUTDOWN        = wire.NbdESHUTDOWN
	requestHeaderLen    = wire.RequestHeaderLen
	simpleReplyLen      = wire.SimpleReplyLen
	structuredHeaderLen = wire.StructuredHeaderLen
	replyPrefix         = wire.ReplyPrefix
)

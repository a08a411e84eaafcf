package nbd

// Wire holds the protocol constants of proto.go under exported names, for
// the in-module client (nbd/nbdclient), so that client and server speak
// from one table. They are not meant for other users.
var Wire = struct {
	NBDMagic, OptMagic, OptReplyMagic                 uint64
	RequestMagic, SimpleMagic, StructuredMagic        uint32
	FlagFixedNewstyle, FlagNoZeroes                   uint16
	FlagCFixedNewstyle, FlagCNoZeroes                 uint32
	OptExportName, OptAbort, OptStartTLS, OptGo       uint32
	OptStructuredReply                                uint32
	RepAck, RepInfo, RepErr                           uint32
	RepErrUnsup, RepErrPolicy, RepErrUnknown          uint32
	RepErrTLSReqd, RepErrShutdown, RepErrInvalid      uint32
	InfoExport, InfoBlockSize                         uint16
	CmdRead, CmdWrite, CmdDisc, CmdFlush, CmdTrim     uint16
	CmdFlagFUA                                        uint16
	ReplyFlagDone, ReplyTypeNone, ReplyTypeOffsetData uint16
	ReplyTypeError                                    uint16
	MaxStringLen                                      int
}{
	nbdMagic, optMagic, optReplyMagic,
	requestMagic, simpleMagic, structuredMagic,
	flagFixedNewstyle, flagNoZeroes,
	flagCFixedNewstyle, flagCNoZeroes,
	optExportName, optAbort, optStartTLS, optGo,
	optStructuredReply,
	repAck, repInfo, repErr,
	repErrUnsup, repErrPolicy, repErrUnknown,
	repErrTLSReqd, repErrShutdown, repErrInvalid,
	infoExport, infoBlockSize,
	cmdRead, cmdWrite, cmdDisc, cmdFlush, cmdTrim,
	cmdFlagFUA,
	replyFlagDone, replyTypeNone, replyTypeOffsetData,
	replyTypeError,
	maxStringLen,
}

package partition

import (
	"encoding/hex"
	"fmt"
)

// GUID is a GPT GUID in its text order: GUID{0xC1, 0x2A, …} is
// "c12a7328-…". On disk the first three fields are little-endian (the
// "mixed-endian" layout of the UEFI specification); Read converts, so a
// GUID compares and prints the way sgdisk, blkid and /dev/disk/by-partuuid
// show it.
type GUID [16]byte

// String returns the GUID in lower case, as the kernel's PARTUUID and
// blkid write it (sgdisk prints upper case; ParseGUID takes either).
func (g GUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], g[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], g[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], g[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], g[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], g[10:16])
	return string(b[:])
}

// IsZero reports whether g is the all-zero GUID, the type of an unused
// GPT entry.
func (g GUID) IsZero() bool { return g == GUID{} }

// ParseGUID parses "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" in either case,
// optionally in braces as Windows writes it.
func ParseGUID(s string) (GUID, error) {
	var g GUID
	t := s
	if len(t) == 38 && t[0] == '{' && t[37] == '}' {
		t = t[1:37]
	}
	if len(t) != 36 || t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
		return g, fmt.Errorf("%w: %q is not a GUID (want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", ErrInvalid, s)
	}
	h := t[0:8] + t[9:13] + t[14:18] + t[19:23] + t[24:36]
	if _, err := hex.Decode(g[:], []byte(h)); err != nil {
		return GUID{}, fmt.Errorf("%w: %q is not a GUID (not hexadecimal)", ErrInvalid, s)
	}
	return g, nil
}

// guidFromDisk converts the 16 on-disk bytes (first three fields
// little-endian) to text order.
func guidFromDisk(b []byte) GUID {
	var g GUID
	g[0], g[1], g[2], g[3] = b[3], b[2], b[1], b[0]
	g[4], g[5] = b[5], b[4]
	g[6], g[7] = b[7], b[6]
	copy(g[8:], b[8:16])
	return g
}

func mustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// Well-known partition type GUIDs. They are variables only because Go has
// no array constants: treat them as constants.
var (
	TypeEFISystem         = mustGUID("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
	TypeBIOSBoot          = mustGUID("21686148-6449-6E6F-744E-656564454649")
	TypeLinuxFilesystem   = mustGUID("0FC63DAF-8483-4772-8E79-3D69D8477DE4")
	TypeLinuxLVM          = mustGUID("E6D6D379-F507-44C2-A23C-238F2A3DF928")
	TypeLinuxSwap         = mustGUID("0657FD6D-A4AB-43C4-84E5-0933C84B4F4F")
	TypeLinuxLUKS         = mustGUID("CA7D7CCB-63ED-4C53-861C-1742536059CC")
	TypeLinuxDMCrypt      = mustGUID("7FFEC5C9-2D00-49B7-8941-3EA10A5586B7")
	TypeLinuxRAID         = mustGUID("A19D880F-05FC-4D3B-A006-743F0F84911E")
	TypeLinuxRootX86_64   = mustGUID("4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709")
	TypeMicrosoftBasic    = mustGUID("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")
	TypeMicrosoftReserved = mustGUID("E3C9E316-0B5C-4DB8-817D-F92DF00215AE")
	TypeVeraCrypt         = mustGUID("8C8F8EFF-AC95-4770-814A-21994F2DBC8F")
)

// gptTypeNames are sgdisk's names (sgdisk -L, GPT fdisk 1.0.9), so that a
// listing of ours reads like the tool's; TestGPTTypeNames checks each one
// against sgdisk.
var gptTypeNames = map[GUID]string{
	TypeEFISystem:       "EFI system partition",
	TypeBIOSBoot:        "BIOS boot partition",
	TypeLinuxFilesystem: "Linux filesystem",
	TypeLinuxLVM:        "Linux LVM",
	TypeLinuxSwap:       "Linux swap",
	TypeLinuxLUKS:       "Linux LUKS",
	TypeLinuxDMCrypt:    "Linux dm-crypt",
	TypeLinuxRAID:       "Linux RAID",
	TypeLinuxRootX86_64: "Linux x86-64 root (/)",
	mustGUID("44479540-F297-41B2-9AF7-D131D5F0458A"): "Linux x86 root (/)",
	mustGUID("B921B045-1DF0-41C3-AF44-4C6F280D3FAE"): "Linux ARM64 root (/)",
	mustGUID("69DAD710-2CE4-4E3C-B16C-21A1D49ABED3"): "Linux ARM32 root (/)",
	mustGUID("933AC7E1-2EB4-4F13-B844-0E14E2AEF915"): "Linux /home",
	mustGUID("3B8F8425-20E0-4F3B-907F-1A25A76F98E8"): "Linux /srv",
	mustGUID("4D21B016-B534-45C2-A9FB-5C16E091FD2D"): "Linux /var",
	mustGUID("7EC6F557-3BC5-4ACA-B293-16EF5DF639D1"): "Linux /var/tmp",
	mustGUID("8DA63339-0007-60C0-C436-083AC8230908"): "Linux reserved",
	mustGUID("8484680C-9521-48C6-9C11-B0720656F69E"): "Linux x86-64 /usr",
	mustGUID("BC13C2FF-59E6-4262-A352-B275FD6F7172"): "XBOOTLDR partition",
	TypeMicrosoftBasic:                               "Microsoft basic data",
	TypeMicrosoftReserved:                            "Microsoft reserved",
	mustGUID("DE94BBA4-06D1-4D40-A16A-BFD50179D6AC"): "Windows RE",
	mustGUID("AF9B60A0-1431-4F62-BC68-3311714A69AD"): "Windows LDM data",
	mustGUID("5808C8AA-7E8F-42E0-85D2-E1E90434CFB3"): "Windows LDM metadata",
	mustGUID("48465300-0000-11AA-AA11-00306543ECAC"): "Apple HFS/HFS+",
	mustGUID("7C3457EF-0000-11AA-AA11-00306543ECAC"): "Apple APFS",
	mustGUID("516E7CB6-6ECF-11D6-8FF8-00022D09712B"): "FreeBSD UFS",
	mustGUID("516E7CB5-6ECF-11D6-8FF8-00022D09712B"): "FreeBSD swap",
	mustGUID("516E7CBA-6ECF-11D6-8FF8-00022D09712B"): "FreeBSD ZFS",
	mustGUID("6A898CC3-1DD2-11B2-99A6-080020736631"): "Solaris /usr & Mac ZFS",
	TypeVeraCrypt: "Veracrypt data",
	mustGUID("FE3A2A5D-4F32-41A7-B725-ACCC3285A309"): "ChromeOS kernel",
	mustGUID("3CB8E202-3B7E-47DD-8A3C-7FF2A13CFCEC"): "ChromeOS root",
}

// GPTTypeName returns sgdisk's name of a GPT partition type, or "" for a
// type this package does not know.
func GPTTypeName(g GUID) string { return gptTypeNames[g] }

// mbrTypeNames are sfdisk's names (sfdisk -T --label dos, util-linux
// 2.38); TestMBRTypeNames checks each one against sfdisk.
var mbrTypeNames = map[byte]string{
	0x01: "FAT12",
	0x04: "FAT16 <32M",
	0x05: "Extended",
	0x06: "FAT16",
	0x07: "HPFS/NTFS/exFAT",
	0x0b: "W95 FAT32",
	0x0c: "W95 FAT32 (LBA)",
	0x0e: "W95 FAT16 (LBA)",
	0x0f: "W95 Ext'd (LBA)",
	0x11: "Hidden FAT12",
	0x17: "Hidden HPFS/NTFS",
	0x1b: "Hidden W95 FAT32",
	0x1c: "Hidden W95 FAT32 (LBA)",
	0x27: "Hidden NTFS WinRE",
	0x42: "SFS",
	0x82: "Linux swap / Solaris",
	0x83: "Linux",
	0x85: "Linux extended",
	0x88: "Linux plaintext",
	0x8e: "Linux LVM",
	0xa5: "FreeBSD",
	0xa6: "OpenBSD",
	0xa9: "NetBSD",
	0xaf: "HFS / HFS+",
	0xda: "Non-FS data",
	0xea: "Linux extended boot",
	0xee: "GPT",
	0xef: "EFI (FAT-12/16/32)",
	0xfd: "Linux raid autodetect",
}

// MBRTypeName returns sfdisk's name of an MBR partition type byte, or ""
// for a type this package does not know.
func MBRTypeName(t byte) string { return mbrTypeNames[t] }

// isExtended reports the MBR types Linux follows as an extended partition
// (DOS_EXTENDED_PARTITION, WIN98_EXTENDED_PARTITION,
// LINUX_EXTENDED_PARTITION).
func isExtended(t byte) bool { return t == 0x05 || t == 0x0f || t == 0x85 }

// looksLikeGUID reports whether s has the shape of a GUID, so that Find
// can tell a bare PARTUUID from a label.
func looksLikeGUID(s string) bool {
	_, err := ParseGUID(s)
	return err == nil
}

// looksLikeMBRPartUUID reports the kernel's MBR PARTUUID shape,
// "1234abcd-05".
func looksLikeMBRPartUUID(s string) bool {
	if len(s) != 11 || s[8] != '-' {
		return false
	}
	_, err := hex.DecodeString(s[:8] + s[9:])
	return err == nil
}

//go:build pkcs11 && cgo

package token

// A small PKCS#11 binding: the module is dlopen()ed and reached through
// the function list C_GetFunctionList returns. The types below are the
// PKCS#11 v2.40 ones with Unix packing (none); CK_ULONG is unsigned long.
// Only the functions this package calls are given names in the list; the
// list's order is the specification's, so the prefix up to C_Decrypt is
// enough.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long ck_ulong;
typedef unsigned char ck_byte;

typedef struct { ck_byte major, minor; } ck_version;
typedef struct {
	ck_version cryptoki_version;
	ck_byte manufacturer_id[32];
	ck_ulong flags;
	ck_byte library_description[32];
	ck_version library_version;
} ck_info;
typedef struct {
	ck_byte slot_description[64];
	ck_byte manufacturer_id[32];
	ck_ulong flags;
	ck_version hardware_version, firmware_version;
} ck_slot_info;
typedef struct {
	ck_byte label[32];
	ck_byte manufacturer_id[32];
	ck_byte model[16];
	ck_byte serial_number[16];
	ck_ulong flags;
	ck_ulong max_session_count, session_count, max_rw_session_count, rw_session_count;
	ck_ulong max_pin_len, min_pin_len;
	ck_ulong total_public_memory, free_public_memory, total_private_memory, free_private_memory;
	ck_version hardware_version, firmware_version;
	ck_byte utc_time[16];
} ck_token_info;
typedef struct { ck_ulong type; void *value; ck_ulong value_len; } ck_attribute;
typedef struct { ck_ulong mechanism; void *parameter; ck_ulong parameter_len; } ck_mechanism;
typedef struct {
	void *create_mutex, *destroy_mutex, *lock_mutex, *unlock_mutex;
	ck_ulong flags;
	void *reserved;
} ck_c_initialize_args;

typedef ck_ulong (*fn_initialize)(void *);
typedef ck_ulong (*fn_finalize)(void *);
typedef ck_ulong (*fn_get_info)(ck_info *);
typedef ck_ulong (*fn_get_slot_list)(ck_byte, ck_ulong *, ck_ulong *);
typedef ck_ulong (*fn_get_slot_info)(ck_ulong, ck_slot_info *);
typedef ck_ulong (*fn_get_token_info)(ck_ulong, ck_token_info *);
typedef ck_ulong (*fn_open_session)(ck_ulong, ck_ulong, void *, void *, ck_ulong *);
typedef ck_ulong (*fn_close_session)(ck_ulong);
typedef ck_ulong (*fn_login)(ck_ulong, ck_ulong, ck_byte *, ck_ulong);
typedef ck_ulong (*fn_get_attribute_value)(ck_ulong, ck_ulong, ck_attribute *, ck_ulong);
typedef ck_ulong (*fn_find_objects_init)(ck_ulong, ck_attribute *, ck_ulong);
typedef ck_ulong (*fn_find_objects)(ck_ulong, ck_ulong *, ck_ulong, ck_ulong *);
typedef ck_ulong (*fn_find_objects_final)(ck_ulong);
typedef ck_ulong (*fn_decrypt_init)(ck_ulong, ck_mechanism *, ck_ulong);
typedef ck_ulong (*fn_decrypt)(ck_ulong, ck_byte *, ck_ulong, ck_byte *, ck_ulong *);

typedef struct {
	ck_version version;
	fn_initialize C_Initialize;
	fn_finalize C_Finalize;
	fn_get_info C_GetInfo;
	void *C_GetFunctionList;
	fn_get_slot_list C_GetSlotList;
	fn_get_slot_info C_GetSlotInfo;
	fn_get_token_info C_GetTokenInfo;
	void *C_GetMechanismList, *C_GetMechanismInfo, *C_InitToken, *C_InitPIN, *C_SetPIN;
	fn_open_session C_OpenSession;
	fn_close_session C_CloseSession;
	void *C_CloseAllSessions, *C_GetSessionInfo, *C_GetOperationState, *C_SetOperationState;
	fn_login C_Login;
	void *C_Logout, *C_CreateObject, *C_CopyObject, *C_DestroyObject, *C_GetObjectSize;
	fn_get_attribute_value C_GetAttributeValue;
	void *C_SetAttributeValue;
	fn_find_objects_init C_FindObjectsInit;
	fn_find_objects C_FindObjects;
	fn_find_objects_final C_FindObjectsFinal;
	void *C_EncryptInit, *C_Encrypt, *C_EncryptUpdate, *C_EncryptFinal;
	fn_decrypt_init C_DecryptInit;
	fn_decrypt C_Decrypt;
} ck_function_list;

typedef ck_ulong (*fn_get_function_list)(ck_function_list **);

static const char *p11_load(const char *path, void **handle, ck_function_list **fl) {
	*handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (*handle == NULL) {
		return dlerror();
	}
	fn_get_function_list get = (fn_get_function_list)dlsym(*handle, "C_GetFunctionList");
	if (get == NULL) {
		return "the library has no C_GetFunctionList";
	}
	if (get(fl) != 0 || *fl == NULL) {
		return "C_GetFunctionList failed";
	}
	return NULL;
}

// CKF_OS_LOCKING_OK: the module may use the OS's locks (Go calls it from
// several threads).
static ck_ulong p11_initialize(ck_function_list *f) {
	ck_c_initialize_args a;
	memset(&a, 0, sizeof a);
	a.flags = 2;
	return f->C_Initialize(&a);
}
static ck_ulong p11_finalize(ck_function_list *f) { return f->C_Finalize(NULL); }
static ck_ulong p11_get_info(ck_function_list *f, ck_info *i) { return f->C_GetInfo(i); }
static ck_ulong p11_get_slot_list(ck_function_list *f, ck_ulong *slots, ck_ulong *n) { return f->C_GetSlotList(1, slots, n); }
static ck_ulong p11_get_slot_info(ck_function_list *f, ck_ulong s, ck_slot_info *i) { return f->C_GetSlotInfo(s, i); }
static ck_ulong p11_get_token_info(ck_function_list *f, ck_ulong s, ck_token_info *i) { return f->C_GetTokenInfo(s, i); }
// CKF_SERIAL_SESSION, read-only.
static ck_ulong p11_open_session(ck_function_list *f, ck_ulong s, ck_ulong *h) { return f->C_OpenSession(s, 4, NULL, NULL, h); }
static ck_ulong p11_close_session(ck_function_list *f, ck_ulong h) { return f->C_CloseSession(h); }
// CKU_USER.
static ck_ulong p11_login(ck_function_list *f, ck_ulong h, ck_byte *pin, ck_ulong n) { return f->C_Login(h, 1, pin, n); }
static ck_ulong p11_get_attribute_value(ck_function_list *f, ck_ulong h, ck_ulong o, ck_attribute *a, ck_ulong n) { return f->C_GetAttributeValue(h, o, a, n); }
static ck_ulong p11_find_objects_init(ck_function_list *f, ck_ulong h, ck_attribute *a, ck_ulong n) { return f->C_FindObjectsInit(h, a, n); }
static ck_ulong p11_find_objects(ck_function_list *f, ck_ulong h, ck_ulong *o, ck_ulong max, ck_ulong *n) { return f->C_FindObjects(h, o, max, n); }
static ck_ulong p11_find_objects_final(ck_function_list *f, ck_ulong h) { return f->C_FindObjectsFinal(h); }
// CKM_RSA_PKCS.
static ck_ulong p11_decrypt_init(ck_function_list *f, ck_ulong h, ck_ulong key) {
	ck_mechanism m = {1, NULL, 0};
	return f->C_DecryptInit(h, &m, key);
}
static ck_ulong p11_decrypt(ck_function_list *f, ck_ulong h, ck_byte *in, ck_ulong n, ck_byte *out, ck_ulong *outn) { return f->C_Decrypt(h, in, n, out, outn); }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

func init() { loadPKCS11 = loadCgoPKCS11 }

// cgoLib is a dlopen()ed module. Libraries stay loaded for the process's
// life (unloading and reloading a module is a known source of crashes);
// each use initialises it and finalises it when done, under lib.mu, so
// tokens created meanwhile are seen and uses do not interleave.
type cgoLib struct {
	mu sync.Mutex
	fl *C.ck_function_list
}

var (
	libsMu sync.Mutex
	libs   = map[string]*cgoLib{}
)

func loadCgoPKCS11(path string) (p11Module, error) {
	libsMu.Lock()
	lib, ok := libs[path]
	if !ok {
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var handle unsafe.Pointer
		var fl *C.ck_function_list
		if msg := C.p11_load(cpath, &handle, &fl); msg != nil {
			libsMu.Unlock()
			return nil, errors.New(C.GoString(msg))
		}
		lib = &cgoLib{fl: fl}
		libs[path] = lib
	}
	libsMu.Unlock()
	lib.mu.Lock()
	rv := C.p11_initialize(lib.fl)
	if rv != 0 && rv != ckrCryptokiInitialized {
		lib.mu.Unlock()
		return nil, &p11Error{"C_Initialize", uint64(rv)}
	}
	return &cgoModule{lib: lib, fl: lib.fl, finalize: rv == 0}, nil
}

type cgoModule struct {
	lib      *cgoLib
	fl       *C.ck_function_list
	finalize bool
	closed   bool
}

func ckErr(fn string, rv C.ck_ulong) error {
	if rv == 0 {
		return nil
	}
	return &p11Error{fn, uint64(rv)}
}

func ckString(b []C.ck_byte) string {
	return string(C.GoBytes(unsafe.Pointer(&b[0]), C.int(len(b))))
}

func (m *cgoModule) Info() (p11Info, error) {
	var i C.ck_info
	if err := ckErr("C_GetInfo", C.p11_get_info(m.fl, &i)); err != nil {
		return p11Info{}, err
	}
	return p11Info{
		Manufacturer: ckString(i.manufacturer_id[:]), Description: ckString(i.library_description[:]),
		Major: uint8(i.library_version.major), Minor: uint8(i.library_version.minor),
	}, nil
}

// maxSlots bounds the slot list a module may report.
const maxSlots = 1024

func (m *cgoModule) Slots() ([]p11Slot, error) {
	var n C.ck_ulong
	if err := ckErr("C_GetSlotList", C.p11_get_slot_list(m.fl, nil, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxSlots {
		return nil, fmt.Errorf("C_GetSlotList: %d slots", n)
	}
	ids := (*C.ck_ulong)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.ck_ulong(0)))))
	defer C.free(unsafe.Pointer(ids))
	if err := ckErr("C_GetSlotList", C.p11_get_slot_list(m.fl, ids, &n)); err != nil {
		return nil, err
	}
	var out []p11Slot
	for _, id := range unsafe.Slice(ids, int(min(n, maxSlots))) {
		var si C.ck_slot_info
		if C.p11_get_slot_info(m.fl, id, &si) != 0 {
			continue
		}
		ti, err := m.tokenInfo(id)
		if err != nil {
			continue // removed meanwhile, or unusable
		}
		out = append(out, p11Slot{ID: uint64(id), Description: ckString(si.slot_description[:]),
			Manufacturer: ckString(si.manufacturer_id[:]), Token: ti})
	}
	return out, nil
}

func (m *cgoModule) tokenInfo(slot C.ck_ulong) (p11TokenInfo, error) {
	var t C.ck_token_info
	if err := ckErr("C_GetTokenInfo", C.p11_get_token_info(m.fl, slot, &t)); err != nil {
		return p11TokenInfo{}, err
	}
	return p11TokenInfo{Label: ckString(t.label[:]), Manufacturer: ckString(t.manufacturer_id[:]),
		Model: ckString(t.model[:]), Serial: ckString(t.serial_number[:]), Flags: uint64(t.flags)}, nil
}

func (m *cgoModule) Open(slot uint64) (p11Session, error) {
	var h C.ck_ulong
	if err := ckErr("C_OpenSession", C.p11_open_session(m.fl, C.ck_ulong(slot), &h)); err != nil {
		return nil, err
	}
	return &cgoSession{m: m, slot: C.ck_ulong(slot), h: h}, nil
}

func (m *cgoModule) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	defer m.lib.mu.Unlock()
	if m.finalize {
		return ckErr("C_Finalize", C.p11_finalize(m.fl))
	}
	return nil
}

type cgoSession struct {
	m    *cgoModule
	slot C.ck_ulong
	h    C.ck_ulong
}

func (s *cgoSession) TokenInfo() (p11TokenInfo, error) { return s.m.tokenInfo(s.slot) }

func (s *cgoSession) Login(pin []byte) error {
	if pin == nil {
		return ckErr("C_Login", C.p11_login(s.m.fl, s.h, nil, 0))
	}
	// The PIN is copied to C memory (Go memory may not be kept by C),
	// wiped before it is freed.
	n := len(pin)
	p := (*C.ck_byte)(C.malloc(C.size_t(n + 1)))
	buf := unsafe.Slice(p, n+1)
	for i, b := range pin {
		buf[i] = C.ck_byte(b)
	}
	rv := C.p11_login(s.m.fl, s.h, p, C.ck_ulong(n))
	for i := range buf {
		buf[i] = 0
	}
	C.free(unsafe.Pointer(p))
	return ckErr("C_Login", rv)
}

// cBytes copies b to C memory (nil for an empty slice).
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return C.CBytes(b)
}

func (s *cgoSession) Find(q p11Query, max int) ([]uint64, error) {
	// The template lives in C memory: attribute values are pointers.
	const maxAttrs = 5
	attrs := (*C.ck_attribute)(C.calloc(maxAttrs, C.size_t(unsafe.Sizeof(C.ck_attribute{}))))
	defer C.free(unsafe.Pointer(attrs))
	vals := (*C.ck_ulong)(C.calloc(2, C.size_t(unsafe.Sizeof(C.ck_ulong(0)))))
	defer C.free(unsafe.Pointer(vals))
	true1 := (*C.ck_byte)(C.calloc(1, 1))
	defer C.free(unsafe.Pointer(true1))
	*true1 = 1
	a := unsafe.Slice(attrs, maxAttrs)
	v := unsafe.Slice(vals, 2)
	n := 0
	add := func(typ C.ck_ulong, p unsafe.Pointer, size uintptr) {
		a[n] = C.ck_attribute{_type: typ, value: p, value_len: C.ck_ulong(size)}
		n++
	}
	v[0] = C.ck_ulong(q.Class)
	add(0x0, unsafe.Pointer(&v[0]), unsafe.Sizeof(v[0])) // CKA_CLASS
	if q.X509 {
		v[1] = 0                                              // CKC_X_509
		add(0x80, unsafe.Pointer(&v[1]), unsafe.Sizeof(v[1])) // CKA_CERTIFICATE_TYPE
	}
	if q.Decrypt {
		add(0x105, unsafe.Pointer(true1), 1) // CKA_DECRYPT
	}
	if q.ID != nil {
		p := cBytes(q.ID)
		defer C.free(p)
		add(0x102, p, uintptr(len(q.ID))) // CKA_ID
	}
	if q.Label != nil {
		p := cBytes([]byte(*q.Label))
		defer C.free(p)
		add(0x3, p, uintptr(len(*q.Label))) // CKA_LABEL
	}
	if err := ckErr("C_FindObjectsInit", C.p11_find_objects_init(s.m.fl, s.h, attrs, C.ck_ulong(n))); err != nil {
		return nil, err
	}
	defer C.p11_find_objects_final(s.m.fl, s.h)
	objs := (*C.ck_ulong)(C.calloc(C.size_t(max), C.size_t(unsafe.Sizeof(C.ck_ulong(0)))))
	defer C.free(unsafe.Pointer(objs))
	var got C.ck_ulong
	if err := ckErr("C_FindObjects", C.p11_find_objects(s.m.fl, s.h, objs, C.ck_ulong(max), &got)); err != nil {
		return nil, err
	}
	var out []uint64
	for _, o := range unsafe.Slice(objs, max)[:min(int(got), max)] {
		out = append(out, uint64(o))
	}
	return out, nil
}

// maxValue bounds an attribute value read from a token (a certificate).
const maxValue = 64 << 10

func (s *cgoSession) Value(obj uint64) ([]byte, error) {
	attr := (*C.ck_attribute)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ck_attribute{}))))
	defer C.free(unsafe.Pointer(attr))
	attr._type = 0x11 // CKA_VALUE
	if err := ckErr("C_GetAttributeValue", C.p11_get_attribute_value(s.m.fl, s.h, C.ck_ulong(obj), attr, 1)); err != nil {
		return nil, err
	}
	n := attr.value_len
	if n == 0 || n > maxValue {
		return nil, fmt.Errorf("C_GetAttributeValue: a CKA_VALUE of %d bytes", uint64(n))
	}
	attr.value = C.malloc(C.size_t(n))
	defer C.free(attr.value)
	if err := ckErr("C_GetAttributeValue", C.p11_get_attribute_value(s.m.fl, s.h, C.ck_ulong(obj), attr, 1)); err != nil {
		return nil, err
	}
	if attr.value_len > n {
		return nil, errors.New("C_GetAttributeValue: the value grew")
	}
	return C.GoBytes(attr.value, C.int(attr.value_len)), nil
}

func (s *cgoSession) DecryptRSAPKCS(obj uint64, in []byte) ([]byte, error) {
	if err := ckErr("C_DecryptInit", C.p11_decrypt_init(s.m.fl, s.h, C.ck_ulong(obj))); err != nil {
		return nil, err
	}
	cin := C.CBytes(in)
	defer C.free(cin)
	// RSA's plaintext is never longer than its ciphertext.
	size := C.size_t(len(in))
	out := C.malloc(size)
	defer func() {
		C.memset(out, 0, size)
		C.free(out)
	}()
	outn := C.ck_ulong(size)
	if err := ckErr("C_Decrypt", C.p11_decrypt(s.m.fl, s.h, (*C.ck_byte)(cin), C.ck_ulong(len(in)), (*C.ck_byte)(out), &outn)); err != nil {
		return nil, err
	}
	if C.size_t(outn) > size {
		return nil, errors.New("C_Decrypt: more plaintext than ciphertext")
	}
	return C.GoBytes(out, C.int(outn)), nil
}

func (s *cgoSession) Close() error {
	return ckErr("C_CloseSession", C.p11_close_session(s.m.fl, s.h))
}

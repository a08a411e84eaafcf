package cli

import "github.com/blkcrypt/blkcrypt/internal/outfile"

// inputs lists the files the command reads: DEVICE, --header and the key
// files. An output that is one of them would be destroyed by the
// plaintext written over it.
func (f *openFlags) inputs(dev string) []outfile.Input {
	in := []outfile.Input{{What: "device", Path: dev}}
	for _, g := range []struct{ what, path string }{
		{"header", f.Header}, {"key file", f.KeyFile}, {"volume key file", f.VolumeKeyFile},
	} {
		if g.path != "" && g.path != "-" {
			in = append(in, outfile.Input{What: g.what, Path: g.path})
		}
	}
	return in
}

// checkOutput is outfile.Check of --output (or stdout), a wrong parameter
// when refused.
func checkOutput(env *Env, out string, inputs []outfile.Input) error {
	if err := outfile.Check(out, env.Stdout, inputs); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

// outFile is where `read` writes (outfile.File): renamed into place by
// commit, dropped by abort.
type outFile struct{ *outfile.File }

func (o outFile) commit() error { return o.Commit() }
func (o outFile) abort()        { o.Abort() }

// createOutput opens --output (stdout for "" and "-"); call checkOutput
// first.
func createOutput(env *Env, out string) (outFile, error) {
	f, err := outfile.Create(out, env.Stdout)
	if err != nil {
		return outFile{}, usageErr("%v", err)
	}
	return outFile{f}, nil
}

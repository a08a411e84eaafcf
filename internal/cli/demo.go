package cli

import "context"

// runDemo is the README's first command: a LUKS volume formatted, written,
// read and served (runDemoLUKS).
func runDemo(ctx context.Context, env *Env, p *parsed) error { return runDemoLUKS(ctx, env, p) }

// Railway Infrastructure as Code for pidevops (https://docs.railway.com/infrastructure-as-code).
//
//   railway config plan     preview what would change in the linked environment
//   railway config apply    apply it (asks first; deletions need --confirm-destructive)
//
// Needs Railway CLI 5.42.1 or newer, Node.js 22.6 or newer (the CLI runs this file with
// --experimental-strip-types), and the `railway` npm package where Node can resolve
// `railway/iac` from this file: npm install --prefix .railway railway@3.11.0
//
// Written against the `railway` package 3.11.0 (the `railway/iac` types and helpers) and
// the Railway CLI's IaC compiler. Never planned or applied against a real project, so
// what is below is the API as published, not a tested deployment. Assumptions:
//   - No `source` on the pidevops service: it is deployed from this directory with
//     `railway up`. To deploy from GitHub instead, add `source: github("<owner>/<repo>")`.
//   - NATS_URL is a literal holding Railway's reference template; Railway resolves
//     `${{nats.RAILWAY_PRIVATE_DOMAIN}}` when it deploys, as it does for its own
//     Postgres variables.
//   - The nats service is built from deploy/nats/Dockerfile (the official nats:2.10 image
//     with deploy/nats/nats.conf), since an image source cannot carry a configuration
//     file; its command adds `-a ::` (IPv6, which environments created before 2025-10-16
//     need for private networking). NATS_URL references the service's own password.
//   - The CLI calls the default export with an empty context, so this file does not use
//     ctx (ctx.environment, ctx.shared).
//
// A service managed here must not also be managed by railway.toml: `railway config plan`
// refuses such a service until it is migrated (`railway config migrate`). railway.toml in
// the repository root carries the same build and deploy settings; keep both in step or
// delete the one you do not use. See docs/deploy.md.

import { defineRailway, postgres, preserve, project, service, volume } from "railway/iac";

export default defineRailway(() => {
  const db = postgres("postgres");

  // NATS with users and permissions (deploy/nats/nats.conf, built into nats:2.10 by deploy/nats/Dockerfile): no
  // anonymous client; `pidevops` (serve) owns the events stream and the run queue, `worker` only takes runs. The
  // agent-facing network is pidevops's business, but anything else on the private network is a stranger too.
  const nats = service("nats", {
    build: { builder: "DOCKERFILE", dockerfilePath: "deploy/nats/Dockerfile" },
    volumeMounts: { "/data": volume("nats-data") },
    env: {
      // Set once by the operator (`openssl rand -hex 32`); nats-server refuses to start without them.
      NATS_SERVE_PASSWORD: preserve(),
      NATS_WORKER_PASSWORD: preserve(),
    },
  });

  const pidevops = service("pidevops", {
    // The Dockerfile's default target, runtime: pidevops with Node.js and the pinned agent CLIs.
    build: { builder: "DOCKERFILE", dockerfilePath: "deploy/Dockerfile" },
    // WORKSPACE_ROOT (/app/data/workspaces: mirrors and worktrees) lives on this volume, not on the container's
    // disk, which every deploy replaces. The Dockerfile cannot declare it (Railway refuses VOLUME).
    volumeMounts: { "/app/data": volume("pidevops-data") },
    // As root (RAILWAY_RUN_UID below), pidevops-start gives the volume to uid 10001 and runs pidevops as it.
    start: "pidevops-start serve",
    preDeploy: "pidevops migrate",
    healthcheck: "/health",
    healthcheckTimeout: 60,
    deploy: {
      restartPolicyType: "ON_FAILURE",
      restartPolicyMaxRetries: 10,
      // Railway's default is 0 s between SIGTERM and SIGKILL; pidevops needs up to 10 s.
      drainingSeconds: 15,
    },
    env: {
      DATABASE_URL: db.env.DATABASE_URL,
      NATS_URL: "nats://pidevops:${{nats.NATS_SERVE_PASSWORD}}@${{nats.RAILWAY_PRIVATE_DOMAIN}}:4222",
      // Railway mounts volumes owned by root, which the image's uid 10001 cannot write: the container starts as
      // root, and the start command (deploy/start.sh) chowns the volume's top directories and drops to 10001.
      RAILWAY_RUN_UID: "0",

      // Set by the operator in the Railway dashboard (Variables tab) or with
      // `railway variables --set`. preserve() keeps whatever value Railway holds and
      // stops `railway config apply` from deleting it; nothing here sets a value.
      GITHUB_WEBHOOK_SECRET: preserve(),
      LINEAR_WEBHOOK_SECRET: preserve(),
      TELEGRAM_WEBHOOK_SECRET: preserve(),
      PIDEVOPS_ADMIN_TOKEN: preserve(),
      GITHUB_TOKEN: preserve(),
      LINEAR_API_KEY: preserve(),
      TELEGRAM_BOT_TOKEN: preserve(),
      TELEGRAM_ALLOWED_CHATS: preserve(),
      RUST_LOG: preserve(),
    },
  });

  return project("pidevops", {
    resources: [db, nats, pidevops],
  });
});

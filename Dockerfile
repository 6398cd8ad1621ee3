# syntax=docker/dockerfile:1.7
# tenantplane's service images, one per build target:
#
#   docker build --target planner            -t tenantplane-planner .
#   docker build --target isolation-compiler -t tenantplane-isolation-compiler .
#   docker build --target syncer             -t tenantplane-syncer .
#
# The builder compiles the three service binaries once (cargo's registry and target directory in
# BuildKit cache mounts, so rebuilds are incremental); each runtime image is distroless (glibc,
# CA certificates, no shell) and runs as the non-root user 65532. The `dev` target is what the
# Tiltfile builds around a binary compiled on the developer's machine (docs/deploy.md).

ARG RUST_VERSION=1.89

FROM rust:${RUST_VERSION}-slim-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
        -p tenantplane-planner \
        -p tenantplane-isolation-compiler \
        -p tenantplane-syncer \
    && mkdir -p /out \
    && cp target/release/tenantplane-planner \
          target/release/tenantplane-isolation-compiler \
          target/release/tenantplane-syncer /out/

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
USER 65532:65532

FROM runtime AS planner
COPY --from=builder /out/tenantplane-planner /usr/local/bin/tenantplane-planner
EXPOSE 7401 7402
ENTRYPOINT ["/usr/local/bin/tenantplane-planner"]

FROM runtime AS isolation-compiler
COPY --from=builder /out/tenantplane-isolation-compiler /usr/local/bin/tenantplane-isolation-compiler
EXPOSE 7411 7412
ENTRYPOINT ["/usr/local/bin/tenantplane-isolation-compiler"]

FROM runtime AS syncer
COPY --from=builder /out/tenantplane-syncer /usr/local/bin/tenantplane-syncer
EXPOSE 7421 7422
ENTRYPOINT ["/usr/local/bin/tenantplane-syncer"]

# Development image (Tilt): a static (musl) binary built on the host, in a directory the
# non-root user owns so that live update can replace it; Debian for the `tar` live update needs.
FROM debian:bookworm-slim AS dev
ARG BINARY
COPY --chown=65532:65532 ${BINARY} /app/${BINARY}
USER 65532:65532
WORKDIR /app

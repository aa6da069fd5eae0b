# syntax=docker/dockerfile:1
#
# tokenmeter: multi-stage build. The first stage compiles the product binary
# (the workspace's `tokenmeter`, without the benchmark rig); the runtime
# image is distroless (no shell, no package manager), non-root.
#
#   docker build -t tokenmeter .
#   docker run --rm -p 8080:8080 -p 9464:9464 tokenmeter serve --upstream http://my-llm:8000
#   docker run --rm -p 8080:8080 -p 9464:9464 -v $PWD/config:/etc/tokenmeter:ro tokenmeter

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# jemalloc's built-in options (`[env]`), read when jemalloc is compiled.
COPY .cargo ./.cargo
COPY crates ./crates
COPY src ./src
COPY benches ./benches
# The demo embeds the SLO presets (include_str!).
COPY config ./config
# The registry and the target folder are BuildKit caches, kept between
# builds: a change of the sources recompiles only the workspace's crates.
# The binary is copied out of the cache, which is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tokenmeter \
 && cp target/release/tokenmeter ./tokenmeter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/tokenmeter /usr/local/bin/tokenmeter
COPY config/ /etc/tokenmeter/
# Inside a container both listeners must be reachable from outside it.
# (DL3064 flags any ENV whose name contains "TOKEN"; these are addresses.)
# hadolint ignore=DL3064
ENV TOKENMETER_LISTEN=0.0.0.0:8080 \
    TOKENMETER_ADMIN_LISTEN=0.0.0.0:9464
EXPOSE 8080 9464
# distroless "nonroot" user, by number so any runtime can resolve it.
USER 65532:65532
# Probes: GET :9464/healthz (liveness) and GET :9464/readyz (readiness, 503
# while draining). Distroless has no shell or curl for a HEALTHCHECK command;
# use the orchestrator's HTTP probes (see README).
ENTRYPOINT ["/usr/local/bin/tokenmeter"]
CMD ["serve", "--config", "/etc/tokenmeter/tokenmeter.yaml"]

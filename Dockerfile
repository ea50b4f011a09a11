# Reeve's container image, for people who build with Docker or Buildah:
#
#   docker build -t reeve:dev --build-arg VERSION=$(git describe --tags --always) \
#       --build-arg REVISION=$(git rev-parse HEAD) .
#
# The same image without a container engine: `make image` (deploy/image),
# which is what CI builds and tests. This file is not built in CI (no
# container engine there); keep it in step with deploy/image/main.go: static
# binary at /reeve, CA bundle, user 65532, the same OCI labels.

# Build: a static binary (no cgo), stamped like `make build`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-X github.com/reeve-org/reeve/internal/version.version=${VERSION} -X github.com/reeve-org/reeve/internal/version.commit=${REVISION}" \
      -o /out/reeve ./cmd/reeve

# Run: distroless static (CA certificates, /etc/passwd with nonroot = 65532,
# no shell, no libc).
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="reeve" \
      org.opencontainers.image.description="Reeve: scheduler, supervisor and CLI of the Scheduler Agent Supervisor platform" \
      org.opencontainers.image.source="https://github.com/reeve-org/reeve" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/reeve /reeve
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 7430
ENTRYPOINT ["/reeve"]

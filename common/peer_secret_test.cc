#include "common/peer_secret.h"

#include "gtest/gtest.h"

namespace dtrain {
namespace {

TEST(PeerSecret, IsSixteenBytesAndFreshEveryTime) {
  absl::StatusOr<std::string> a = NewPeerSecret();
  absl::StatusOr<std::string> b = NewPeerSecret();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->size(), 16u);
  EXPECT_EQ(b->size(), 16u);
  EXPECT_NE(*a, *b);
}

TEST(PeerSecret, EqualOnlyForTheSameBytes) {
  const std::string s = *NewPeerSecret();
  std::string other = s;
  other[15] ^= 1;
  EXPECT_TRUE(PeerSecretsEqual(s, std::string(s)));
  EXPECT_FALSE(PeerSecretsEqual(s, other));
  EXPECT_FALSE(PeerSecretsEqual(s, s.substr(0, 15)));  // a prefix is not the secret
  EXPECT_FALSE(PeerSecretsEqual(s, ""));
  EXPECT_FALSE(PeerSecretsEqual("", s));
}

TEST(PeerSecret, TwoEmptySecretsAreEqual) { EXPECT_TRUE(PeerSecretsEqual("", "")); }

}  // namespace
}  // namespace dtrain
